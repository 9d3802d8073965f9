//! `make bench`: keeper's speed, API and backend traffic, CPU and memory, each beside the floor
//! of the same work measured in the same run on the same local control plane (ratios, so the
//! machine's speed cancels out). Prints the table as it goes and writes it as Markdown.
//!
//! Run by `make bench` (release build, a private stack in .keeper-dev/bench); `--smoke` runs
//! small sizes only, to check that the benchmark itself works.

mod caches;
mod drains;
mod fleet;
mod floor;
mod kinds;
mod lab;
mod latency;
mod objects;
mod report;
mod starvation;
mod steady;
mod writes;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::lab::Lab;
use crate::report::Report;

#[derive(Parser)]
#[command(about = "keeper against the sequential floor of the same backend work")]
struct Args {
    /// Small sizes only (a minute): checks that the benchmark works, judges nothing.
    #[arg(long)]
    smoke: bool,
    /// Sections to run (default: all): buckets, tenants, databases, caches, drains (or only
    /// drains-s3, drains-grid), latency (or only latency-buckets, latency-tenants,
    /// latency-databases), steady, starvation, fleet.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Where to write the Markdown results.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Numbers of S3Buckets (one tenant) to measure; the last one is also left idle.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1000])]
    buckets: Vec<usize>,
    /// Numbers of S3Tenants (StorageGRID) to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1000])]
    tenants: Vec<usize>,
    /// Number of CloudDatabases to measure.
    #[arg(long, default_value_t = 200)]
    databases: usize,
    /// Numbers of objects in the API for the memory and start figures.
    #[arg(long, value_delimiter = ',', default_values_t = [1000, 10000])]
    cached: Vec<usize>,
    /// Numbers of objects to drain, on each provider.
    #[arg(long, value_delimiter = ',', default_values_t = [10000, 100000])]
    drained: Vec<usize>,
    /// Numbers of objects to drain on StorageGRID, when not `--drained` (the emulator's moto
    /// has run out of memory draining 100,000 objects on a 24 GiB machine).
    #[arg(long, value_delimiter = ',')]
    drained_grid: Option<Vec<usize>>,
    /// Steady-state section: Ready S3Buckets per provider.
    #[arg(long, default_value_t = 100)]
    steady_buckets: usize,
    /// Steady-state section: the `bucketCheckInterval` keeper runs with, in seconds, standing
    /// for the default hour.
    #[arg(long, default_value_t = 20)]
    steady_interval: u64,
    /// Steady-state section: intervals the window spans.
    #[arg(long, default_value_t = 3)]
    steady_intervals: u32,
    /// Fleet section: S3Buckets per provider (StorageGRID; provider s3 see --fleet-s3-buckets).
    #[arg(long, default_value_t = 10000)]
    fleet_buckets: usize,
    /// Fleet section: tenants the buckets are spread over (one namespace each).
    #[arg(long, default_value_t = 100)]
    fleet_tenants: usize,
    /// Fleet section: S3Buckets on provider s3, in as many tenants as keep the buckets per
    /// tenant of --fleet-buckets. Fewer by default: moto takes about 9 ms of CPU per call and a
    /// bucket costs 8 calls to Ready and 5 to deletion, so 10,000 would take most of an hour of
    /// this fleet's time on 2 cores.
    #[arg(long, default_value_t = 2000)]
    fleet_s3_buckets: usize,
    /// Fleet section: providers to build a fleet on (default = StorageGRID, s3 = S3-compatible).
    #[arg(long, value_delimiter = ',', default_values_t = ["default".to_string(), "s3".to_string()])]
    fleet_providers: Vec<String>,
    /// Fleet section: the `bucketCheckInterval` of the idle window in seconds, standing for the
    /// default hour.
    #[arg(long, default_value_t = 60)]
    fleet_interval: u64,
    /// Fleet section: intervals the idle window spans.
    #[arg(long, default_value_t = 2)]
    fleet_intervals: u32,
    /// Fleet section: buckets changed one at a time to count the reconciles each sets off.
    #[arg(long, default_value_t = 10)]
    fleet_changes: usize,
    /// Fleet section: S3Buckets (provider s3) of the rate-limited fleet.
    #[arg(long, default_value_t = 300)]
    fleet_rate_buckets: usize,
    /// Fleet section: tenants of the rate-limited fleet.
    #[arg(long, default_value_t = 3)]
    fleet_rate_tenants: usize,
    /// Fleet section: `requestsPerSecond` of provider s3 in the rate-limited fleet (below what
    /// keeper asks of moto unlimited, so that it binds).
    #[arg(long, default_value_t = 30)]
    fleet_rate: u32,
    /// Fleet section: `requestBurst` of provider s3 in the rate-limited fleet.
    #[arg(long, default_value_t = 10)]
    fleet_rate_burst: u32,
    /// Latency section: milliseconds added to every call of the backend under test.
    #[arg(long, default_value_t = 200)]
    latency_ms: u64,
    /// Latency section: S3Buckets (provider s3) to measure.
    #[arg(long, default_value_t = 100)]
    latency_buckets: usize,
    /// Latency section: S3Tenants (StorageGRID) to measure.
    #[arg(long, default_value_t = 50)]
    latency_tenants: usize,
    /// Latency section: CloudDatabases to measure.
    #[arg(long, default_value_t = 50)]
    latency_databases: usize,
    /// Latency section: objects the sequential safe floor is measured on, scaled linearly to
    /// the sizes above (at 200 ms, 100 buckets one after another would take 4 minutes).
    #[arg(long, default_value_t = 10)]
    latency_sample: usize,
    /// Latency section: `runtime.concurrency` values to run keeper with, one run each, besides
    /// keeper's defaults (`default`).
    #[arg(long, value_delimiter = ',', default_values_t = ["default".to_string()])]
    latency_concurrency: Vec<String>,
    /// Starvation section: client-side drains (provider s3) running while the new buckets are
    /// made Ready.
    #[arg(long, default_value_t = 10)]
    starvation_drains: usize,
    /// Starvation section: objects in each drained bucket.
    #[arg(long, default_value_t = 10000)]
    starvation_objects: usize,
    /// Starvation section: the drains' `maxDeletesPerSecond`, low so that they run through the
    /// measurement (10,000 objects at 100/s last about as long as 100,000 at the default 1,000/s).
    #[arg(long, default_value_t = 100)]
    starvation_deletes_per_second: u32,
    /// Starvation section: new S3Buckets made Ready beside the drains, and with no drain.
    #[arg(long, default_value_t = 100)]
    starvation_buckets: usize,
    /// Starvation section: milliseconds added to every S3 and IAM call while measuring.
    #[arg(long, default_value_t = 200)]
    starvation_latency_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // Stopped by hand: dropping the run drops the keeper processes it started, which stops them
    // (a signal's default action would leave them running).
    tokio::select! {
        done = measure(args) => done,
        _ = terminate.recv() => anyhow::bail!("stopped by SIGTERM"),
        _ = tokio::signal::ctrl_c() => anyhow::bail!("stopped by SIGINT"),
    }
}

/// Runs the parts `args` asks for and writes the results.
async fn measure(args: Args) -> anyhow::Result<()> {
    let run = Run::now();
    let lab = Lab::from_env()?;
    let wanted = |s: &str| args.only.is_empty() || args.only.iter().any(|o| o == s);
    let mut report = Report::default();
    let env = lab.keeper_env("default", |_| {})?;
    if wanted("buckets") {
        let sizes = if args.smoke {
            vec![10, 20]
        } else {
            args.buckets.clone()
        };
        let idle = Duration::from_secs(if args.smoke { 5 } else { 30 });
        let done = kinds::buckets(&lab, &env, &mut report, &sizes, idle).await;
        part_done(&args, &run, &mut report, "buckets", done)?;
    }
    if wanted("tenants") {
        let sizes = if args.smoke {
            vec![10]
        } else {
            args.tenants.clone()
        };
        let done = kinds::tenants(&lab, &env, &mut report, &sizes).await;
        part_done(&args, &run, &mut report, "tenants", done)?;
    }
    if wanted("databases") {
        let n = if args.smoke { 10 } else { args.databases };
        let done = kinds::databases(&lab, &env, &mut report, n).await;
        part_done(&args, &run, &mut report, "databases", done)?;
    }
    if wanted("caches") {
        let sizes = if args.smoke {
            vec![100]
        } else {
            args.cached.clone()
        };
        let done = caches::run(&lab, &mut report, &sizes).await;
        part_done(&args, &run, &mut report, "caches", done)?;
    }
    let drained = if args.smoke {
        vec![2000]
    } else {
        args.drained.clone()
    };
    if wanted("drains") || wanted("drains-s3") {
        let done = drains::s3(&lab, &mut report, &drained).await;
        part_done(&args, &run, &mut report, "drains-s3", done)?;
    }
    if wanted("drains") || wanted("drains-grid") {
        let sizes = match &args.drained_grid {
            Some(sizes) if !args.smoke => sizes.clone(),
            _ => drained.clone(),
        };
        let done = drains::grid(&lab, &mut report, &sizes).await;
        part_done(&args, &run, &mut report, "drains-grid", done)?;
    }
    if wanted("steady") {
        let settings = steady::Settings {
            buckets: if args.smoke { 10 } else { args.steady_buckets },
            interval: Duration::from_secs(if args.smoke { 5 } else { args.steady_interval }),
            intervals: if args.smoke { 2 } else { args.steady_intervals },
            judged: !args.smoke,
        };
        let done = steady::run(&lab, &mut report, &settings).await;
        part_done(&args, &run, &mut report, "steady", done)?;
    }
    if wanted("starvation") {
        // Smoke: small drains under a cap low enough that they outlast 10 buckets.
        let settings = starvation::Settings {
            drains: if args.smoke {
                2
            } else {
                args.starvation_drains
            },
            objects: if args.smoke {
                500
            } else {
                args.starvation_objects
            },
            deletes_per_second: if args.smoke {
                20
            } else {
                args.starvation_deletes_per_second
            },
            buckets: if args.smoke {
                10
            } else {
                args.starvation_buckets
            },
            latency: Duration::from_millis(args.starvation_latency_ms),
            judged: !args.smoke,
        };
        let done = starvation::run(&lab, &mut report, &settings).await;
        part_done(&args, &run, &mut report, "starvation", done)?;
    }
    if wanted("fleet") {
        let settings = if args.smoke {
            fleet::Settings {
                providers: args.fleet_providers.clone(),
                buckets: 200,
                tenants: 4,
                s3_buckets: 200,
                interval: Duration::from_secs(10),
                intervals: 2,
                changes: 3,
                rate: fleet::RateSettings {
                    buckets: 60,
                    tenants: 2,
                    per_second: args.fleet_rate,
                    burst: args.fleet_rate_burst,
                },
                judged: false,
            }
        } else {
            fleet::Settings {
                providers: args.fleet_providers.clone(),
                buckets: args.fleet_buckets,
                tenants: args.fleet_tenants,
                s3_buckets: args.fleet_s3_buckets,
                interval: Duration::from_secs(args.fleet_interval),
                intervals: args.fleet_intervals,
                changes: args.fleet_changes,
                rate: fleet::RateSettings {
                    buckets: args.fleet_rate_buckets,
                    tenants: args.fleet_rate_tenants,
                    per_second: args.fleet_rate,
                    burst: args.fleet_rate_burst,
                },
                judged: true,
            }
        };
        let done = fleet::run(&lab, &mut report, &settings).await;
        part_done(&args, &run, &mut report, "fleet", done)?;
    }
    let latency_kinds: Vec<latency::Kind> = [
        ("latency-buckets", latency::Kind::Buckets),
        ("latency-tenants", latency::Kind::Tenants),
        ("latency-databases", latency::Kind::Databases),
    ]
    .into_iter()
    .filter(|(name, _)| wanted("latency") || wanted(name))
    .map(|(_, kind)| kind)
    .collect();
    if !latency_kinds.is_empty() {
        let settings = latency::Settings {
            latency: Duration::from_millis(args.latency_ms),
            buckets: if args.smoke { 10 } else { args.latency_buckets },
            tenants: if args.smoke { 5 } else { args.latency_tenants },
            databases: if args.smoke {
                5
            } else {
                args.latency_databases
            },
            sample: if args.smoke { 2 } else { args.latency_sample },
            concurrency: args
                .latency_concurrency
                .iter()
                .map(|c| match c.as_str() {
                    "default" => Ok(None),
                    c => c.parse().map(Some),
                })
                .collect::<Result<_, _>>()
                .map_err(|e| anyhow::anyhow!("--latency-concurrency: {e}"))?,
            judged: !args.smoke,
        };
        let done = latency::run(&lab, &mut report, &settings, &latency_kinds).await;
        part_done(&args, &run, &mut report, "latency", done)?;
    }
    println!("\n{}", report.table());
    for note in &report.notes {
        println!("{note}");
    }
    save(&args, &run, &report, true)?;
    let failures = report.failures();
    if !args.smoke && !failures.is_empty() {
        eprintln!("{} figures miss their goal", failures.len());
    }
    Ok(())
}

/// When the run began and what it measures, taken at its start: the binaries were built from
/// the tree as it was then (a change made while the run goes on is not in them).
struct Run {
    date: String,
    commit: String,
}

impl Run {
    fn now() -> Run {
        let output = |program: &str, args: &[&str]| {
            std::process::Command::new(program)
                .args(args)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default()
        };
        // The results file is this program's output, not a change to what it measures.
        let changed = output(
            "git",
            &[
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":(exclude)bench/results.md",
            ],
        );
        let commit = output("git", &["describe", "--always"]);
        Run {
            date: output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            commit: if changed.is_empty() {
                commit
            } else {
                format!("{commit}-dirty")
            },
        }
    }
}

/// After each part: `--out` is written, so that a run stopped midway leaves what it measured. A
/// part that failed keeps the figures it measured before, and the results say why it stopped.
fn part_done(
    args: &Args,
    run: &Run,
    report: &mut Report,
    part: &str,
    done: anyhow::Result<()>,
) -> anyhow::Result<()> {
    if let Err(e) = &done {
        report.note(format!("part {part} stopped: {e:#}"));
    }
    save(args, run, report, false)?;
    done
}

/// Writes `--out`.
fn save(args: &Args, run: &Run, report: &Report, complete: bool) -> anyhow::Result<()> {
    if let Some(out) = &args.out {
        std::fs::write(out, results(run, report, complete))?;
    }
    Ok(())
}

/// `bench/results.md`: when, where, what, and the table with its notes.
fn results(run: &Run, report: &Report, complete: bool) -> String {
    let Run { date, commit } = run;
    let partial = if complete {
        ""
    } else {
        "**Partial: the run stopped before its end; the parts below are those it finished.**\n\n"
    };
    format!(
        "# make bench results\n\n{partial}{date}, commit {commit}, on {}.\n\n\
         Each figure beside its floor: the same work done one step after another by a plain \
         client, measured in the same run against the same servers: for the three kinds the \
         backend calls and the API writes the same result needs (see docs/development.md, \
         \"Benchmarks\").\n\n{}\n{}\n",
        report::machine(),
        report.table(),
        report
            .notes
            .iter()
            .map(|n| format!("- {n}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}
