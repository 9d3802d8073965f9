//! Kind-specific rules (the registry "strategies"): Secret/ConfigMap data, CRDs, custom
//! resources' structural schemas.

use super::*;

/// Kind-specific rules (the registry "strategies").
pub(super) fn strategy(
    _st: &State,
    def: &ResDef,
    obj: &mut Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    for field in ["spec", "status", "data", "stringData", "binaryData"] {
        let v = &obj[field];
        let kind_ok = match field {
            "data" | "stringData" | "binaryData" => v
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string)),
            _ => v.is_object(),
        };
        if !v.is_null() && !kind_ok && !def.crd {
            return Err(ApiError::bad_request(format!(
                "{} in version \"{}\" cannot be handled as a {}: {field} has the wrong type",
                def.kind, def.version, def.kind
            )));
        }
    }
    if def.crd {
        return Ok(());
    }
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => {
            let name = meta_str(obj, "name").to_string();
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            if old.is_none() {
                obj["spec"]["finalizers"] = json!(["kubernetes"]);
                obj["status"] = json!({"phase": "Active"});
            }
        }
        ("", "secrets") => {
            use base64::Engine;
            if let Some(sd) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
                && let Some(sd) = sd.as_object()
            {
                for (k, v) in sd {
                    let enc = base64::engine::general_purpose::STANDARD
                        .encode(v.as_str().unwrap_or_default());
                    obj["data"][k] = json!(enc);
                }
            }
            if obj["type"].is_null() {
                obj["type"] = json!("Opaque");
            }
            if let Some(d) = obj["data"].as_object() {
                for (k, v) in d {
                    let ok = v.as_str().is_some_and(|s| {
                        base64::engine::general_purpose::STANDARD.decode(s).is_ok()
                    });
                    if !ok {
                        return Err(ApiError::bad_request(format!(
                            "illegal base64 data in Secret data key {k:?}"
                        )));
                    }
                }
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => crd_strategy(obj, old)?,
        ("", "services") if obj["spec"]["type"].is_null() => {
            obj["spec"]["type"] = json!("ClusterIP");
        }
        _ => {}
    }
    if def.group.is_empty() && matches!(def.plural.as_str(), "secrets" | "configmaps") {
        config_data_rules(def, obj, old)?;
    }
    Ok(())
}

/// Secret/ConfigMap data keys and `immutable`, as kube validates them.
fn config_data_rules(def: &ResDef, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
    use regex::Regex;
    use std::sync::OnceLock;
    static KEY: OnceLock<Regex> = OnceLock::new();
    let key_re = KEY.get_or_init(|| Regex::new(r"^[-._a-zA-Z0-9]+$").expect("regex"));
    let name = meta_str(obj, "name").to_string();
    let mut causes = Vec::new();
    for field in ["data", "binaryData"] {
        for k in obj[field]
            .as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            if k.len() > 253 || !key_re.is_match(&k) {
                causes.push(Cause::invalid(
                    format!("{field}[{k}]"),
                    &json!(k),
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                ));
            }
        }
    }
    if let Some(old) = old
        && old["immutable"].as_bool() == Some(true)
    {
        for field in ["data", "binaryData"] {
            if obj[field] != old[field] {
                causes.push(Cause::forbidden(
                    field,
                    "field is immutable when `immutable` is set",
                ));
            }
        }
        if obj["immutable"] != old["immutable"] {
            causes.push(Cause::forbidden(
                "immutable",
                "field is immutable when `immutable` is set",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&def.group, &def.kind, &name, causes))
    }
}

fn crd_strategy(obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
    let name = meta_str(obj, "name").to_string();
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    let group = spec["group"].as_str().unwrap_or_default().to_string();
    let plural = spec["names"]["plural"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kind = spec["names"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if group.is_empty() {
        causes.push(Cause::required("spec.group"));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural"));
    }
    if kind.is_empty() {
        causes.push(Cause::required("spec.names.kind"));
    }
    if !matches!(spec["scope"].as_str(), Some("Namespaced" | "Cluster")) {
        causes.push(Cause::new(
            "FieldValueNotSupported",
            "spec.scope",
            format!(
                "Unsupported value: {}: supported values: \"Cluster\", \"Namespaced\"",
                crate::error::render_value(&spec["scope"])
            ),
        ));
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::invalid(
            "spec.versions",
            &json!([]),
            "must have exactly one version marked as storage version",
        ));
    } else if versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count()
        != 1
    {
        causes.push(Cause::invalid(
            "spec.versions",
            &spec["versions"],
            "must have exactly one version marked as storage version",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        if !v["schema"]["openAPIV3Schema"].is_object() {
            causes.push(Cause::required(format!(
                "spec.versions[{i}].schema.openAPIV3Schema"
            )));
        }
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            &name,
            causes,
        ));
    }
    if obj["spec"]["names"]["singular"].is_null() {
        obj["spec"]["names"]["singular"] = json!(kind.to_lowercase());
    }
    if obj["spec"]["names"]["listKind"].is_null() {
        obj["spec"]["names"]["listKind"] = json!(format!("{kind}List"));
    }
    if obj["spec"]["conversion"].is_null() {
        obj["spec"]["conversion"] = json!({"strategy": "None"});
    }
    let storage = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default();
    // Conditions keep their transition time while they stay true.
    let now = old
        .and_then(|o| o["status"]["conditions"][0]["lastTransitionTime"].as_str())
        .map(str::to_string)
        .unwrap_or_else(store::now);
    let mut stored_versions: Vec<Value> = old
        .and_then(|o| o["status"]["storedVersions"].as_array().cloned())
        .unwrap_or_default();
    if !stored_versions.iter().any(|v| v == storage) {
        stored_versions.push(json!(storage));
    }
    obj["status"] = json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now, "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ],
        "acceptedNames": obj["spec"]["names"].clone(),
        "storedVersions": stored_versions,
    });
    if old.is_none() {
        let mut f = finalizers(obj);
        if !f
            .iter()
            .any(|x| x == "customresourcecleanup.apiextensions.k8s.io")
        {
            f.push("customresourcecleanup.apiextensions.k8s.io".into());
        }
        store::set_finalizers(obj, f);
    }
    Ok(())
}

/// Custom resources: prune unknown fields, apply defaults, validate (the structural schema,
/// then its CEL rules, with `old` for transition rules on update).
pub(super) fn cr_schema(
    def: &ResDef,
    obj: &mut Value,
    old: Option<&Value>,
    ctx: &Ctx,
    warnings: &mut Vec<String>,
    name: &str,
) -> ApiResult<()> {
    let Some(s) = def.schema.as_ref().filter(|s| s.is_object()) else {
        return Ok(());
    };
    prune_unknown(def, obj, ctx, warnings)?;
    schema::default(s, obj);
    let mut causes = Vec::new();
    schema::validate(s, obj, "", &mut causes);
    crate::cel::validate(s, obj, old, &mut causes);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&def.group, &def.kind, name, causes));
    }
    Ok(())
}

/// Drop the fields a custom resource's schema does not know; `fieldValidation=Strict` refuses
/// them, `Ignore` drops them silently, `Warn` (the default) with a warning each.
pub(super) fn prune_unknown(
    def: &ResDef,
    obj: &mut Value,
    ctx: &Ctx,
    warnings: &mut Vec<String>,
) -> ApiResult<()> {
    let Some(s) = def.schema.as_ref().filter(|s| s.is_object()) else {
        return Ok(());
    };
    let mut unknown = Vec::new();
    schema::prune(s, obj, "", &mut unknown);
    if unknown.is_empty() {
        return Ok(());
    }
    let msgs: Vec<String> = unknown
        .iter()
        .map(|u| format!("unknown field \"{u}\""))
        .collect();
    match ctx.q("fieldValidation") {
        Some("Strict") => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            msgs.join(", ")
        ))),
        Some("Ignore") => Ok(()),
        _ => {
            warnings.extend(msgs);
            Ok(())
        }
    }
}

pub(super) fn without(v: &Value, keys: &[&str]) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        for k in keys {
            m.remove(*k);
        }
    }
    v
}
