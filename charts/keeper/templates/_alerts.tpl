{{/*
keeper's alert rules, a Prometheus rules file, with the thresholds of
metrics.prometheusRule.thresholds. templates/prometheusrule.yaml wraps them in a PrometheusRule;
files/alerts.yaml is this output with the default values (ci/check-monitoring.sh checks that the
two agree; the command in the header below regenerates the file). Prometheus' own templating in
the annotations is passed through as Go raw strings.
*/}}
{{- define "keeper.alertRules" -}}
{{- $t := .Values.metrics.prometheusRule.thresholds -}}
# keeper's alert rules: a Prometheus rules file. The chart renders it (templates/_alerts.tpl) with
# the thresholds of metrics.prometheusRule.thresholds into a PrometheusRule
# (metrics.prometheusRule.enabled). charts/keeper/files/alerts.yaml is it with the default
# thresholds, to load without the Prometheus operator; to render it with other thresholds:
#   helm template keeper charts/keeper -f my-values.yaml --set metrics.prometheusRule.enabled=true \
#     --show-only templates/prometheusrule.yaml | awk 'f {print substr($0, 3)} /^spec:/ {f=1}'
# Every alert has a runbook in docs/reference.md ("Runbooks"), linked from its annotations.
# Gauges computed from caches are reported by every replica (the standby keeps warm caches), so
# they are aggregated with max, not sum. Every alert is per install (namespace and job), so that
# one install's state never hides or stands for another's.
groups:
  - name: keeper
    rules:
      - alert: KeeperNoLeader
        # Every healthy install has exactly one replica with keeper_leader 1 (without leader
        # election each replica reports 1). Fires after thresholds.noLeader.for (default 5m).
        expr: |
          max by (namespace, job) (keeper_leader) < 1
            or absent(keeper_leader)
        for: {{ $t.noLeader.for }}
        labels:
          severity: critical
        annotations:
          summary: No keeper replica leads, so nothing is reconciled
          description: No replica has reported keeper_leader 1 for {{ include "keeper.durationWords" $t.noLeader.for }} (or no replica is scraped). Creations, drains and deletions wait.
          runbook_url: https://github.com/keeper-dev/keeper/blob/main/docs/reference.md#keepernoleader

      - alert: KeeperReconcileErrors
        # More than thresholds.reconcileErrors.ratio (default 0.2, a fifth) of the reconciles of a
        # controller fail, for thresholds.reconcileErrors.for (default 15m).
        expr: |
          sum by (namespace, job, controller) (rate(keeper_reconcile_errors_total[10m]))
            / sum by (namespace, job, controller) (rate(keeper_reconcile_total[10m])) > {{ $t.reconcileErrors.ratio }}
        for: {{ $t.reconcileErrors.for }}
        labels:
          severity: warning
        annotations:
          summary: "{{`{{ $labels.controller }}`}} reconciles are failing"
          description: "{{`{{ $value | humanizePercentage }}`}} of the {{`{{ $labels.controller }}`}} reconciles failed over the last 10 minutes."
          runbook_url: https://github.com/keeper-dev/keeper/blob/main/docs/reference.md#keeperreconcileerrors

      - alert: KeeperBackendErrors
        # Transient and permanent failures of one backend above thresholds.backendErrors.ratio
        # (default 0.25, a quarter) of its calls, for thresholds.backendErrors.for (default 15m).
        expr: |
          sum by (namespace, job, backend) (rate(keeper_backend_requests_total{outcome=~"transient|permanent"}[10m]))
            / sum by (namespace, job, backend) (rate(keeper_backend_requests_total[10m])) > {{ $t.backendErrors.ratio }}
        for: {{ $t.backendErrors.for }}
        labels:
          severity: warning
        annotations:
          summary: "Calls to {{`{{ $labels.backend }}`}} are failing"
          description: "{{`{{ $value | humanizePercentage }}`}} of the calls to {{`{{ $labels.backend }}`}} failed over the last 10 minutes."
          runbook_url: https://github.com/keeper-dev/keeper/blob/main/docs/reference.md#keeperbackenderrors

      - alert: KeeperDrainStuck
        # keeper_drains_stuck counts drains that deleted nothing for their stuck threshold
        # (drain.stuckThreshold, default 3h); each also has a BucketDrainingStuck event. Fires
        # above thresholds.drainStuck.count (default 0) for thresholds.drainStuck.for (default 5m).
        expr: max by (namespace, job) (keeper_drains_stuck) > {{ $t.drainStuck.count }}
        for: {{ $t.drainStuck.for }}
        labels:
          severity: warning
        annotations:
          summary: A bucket drain has stopped making progress
          description: "{{`{{ $value }}`}} bucket drain(s) deleted no object for longer than their stuck threshold."
          runbook_url: https://github.com/keeper-dev/keeper/blob/main/docs/reference.md#keeperdrainstuck

      - alert: KeeperDeletionBlocked
        # Blocked deletions wait on a person by design (a tenant with buckets, a bucket with
        # objects, deletion protection); thresholds.deletionBlocked.for (default 24h, a day)
        # means nobody is looking. Fires above thresholds.deletionBlocked.count (default 0).
        expr: max by (namespace, job, kind) (keeper_deletion_blocked) > {{ $t.deletionBlocked.count }}
        for: {{ $t.deletionBlocked.for }}
        labels:
          severity: info
        annotations:
          summary: "A {{`{{ $labels.kind }}`}} deletion has waited on its owner for {{ if has $t.deletionBlocked.for (list "24h" "1d") }}a day{{ else }}{{ include "keeper.durationWords" $t.deletionBlocked.for }}{{ end }}"
          description: "{{`{{ $value }}`}} {{`{{ $labels.kind }}`}} object(s) are being deleted but blocked (DeletionBlocked=True) for {{ include "keeper.durationWords" $t.deletionBlocked.for }}."
          runbook_url: https://github.com/keeper-dev/keeper/blob/main/docs/reference.md#keeperdeletionblocked

      - alert: KeeperObjectsFailed
        # Failed means keeper needs a change of spec, configuration or backend to go on.
        # One alert per kind: the kind label is the gauge's name without its keeper_ prefix.
        # Fires above thresholds.objectsFailed.count (default 0) for thresholds.objectsFailed.for
        # (default 30m).
        expr: |
          max by (namespace, job, kind) (label_replace(
            {__name__=~"keeper_(tenants|buckets|databases)", phase="Failed"}, "kind", "$1", "__name__", "keeper_(.+)"
          )) > {{ $t.objectsFailed.count }}
        for: {{ $t.objectsFailed.for }}
        labels:
          severity: warning
        annotations:
          summary: "keeper {{`{{ $labels.kind }}`}} are Failed"
          description: "{{`{{ $value }}`}} keeper {{`{{ $labels.kind }}`}} have been in phase Failed for {{ include "keeper.durationWords" $t.objectsFailed.for }}."
          runbook_url: https://github.com/keeper-dev/keeper/blob/main/docs/reference.md#keeperobjectsfailed
{{- end -}}
