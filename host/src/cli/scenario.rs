//! `docket scenario run`: rehearses workflows against scripted providers, kills and a
//! simulated clock, and reports each case.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::scenario;

/// `docket scenario run`'s arguments.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Scenario files, or directories of them (default: `scenarios/`).
    pub paths: Vec<PathBuf>,
    /// The workflow definitions the scenarios name.
    #[arg(long, default_value = "workflows")]
    pub workflows: PathBuf,
    /// Component files (`.wasm`) to rehearse besides the examples built into docket.
    #[arg(long = "components", value_name = "FILE")]
    pub components: Vec<PathBuf>,
    /// Also write the results as JUnit XML to this file.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// The seed of the randomness the hosts draw (ids, retry jitter): the same seed gives
    /// the same run.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Runs `work` on a runtime of one thread of its own: the host's tasks and the run's take
/// turns there, so what a simulation sees between two of its steps is what they left.
async fn on_one_thread<A, F>(args: A, work: fn(A) -> F) -> anyhow::Result<ExitCode>
where
    A: Send + 'static,
    F: Future<Output = anyhow::Result<ExitCode>> + 'static,
{
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the simulation's runtime")?
            .block_on(work(args))
    })
    .await
    .context("the simulation's thread ended abnormally")?
}

/// The components (docket's examples and the `files` given) and definitions every case of
/// a command runs with, compiled once.
async fn bench(
    definitions: &scenario::Definitions,
    files: &[PathBuf],
) -> anyhow::Result<scenario::Bench> {
    let mut components: Vec<(Vec<u8>, bool)> = crate::guests::EMBEDDED
        .iter()
        .map(|(_, bytes)| (bytes.to_vec(), true))
        .collect();
    for path in files {
        let bytes =
            std::fs::read(path).with_context(|| format!("reading component {}", path.display()))?;
        components.push((bytes, false));
    }
    let definitions = definitions
        .iter()
        .map(|(name, (file, text, _))| (name.clone(), (file.clone(), text.clone())))
        .collect();
    Ok(scenario::Bench::new(components, definitions, super::adapter::cache_dir()).await?)
}

/// Runs the scenarios; exit status 1 when a case fails or a file is invalid.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    on_one_thread(args, run_here).await
}

async fn run_here(args: RunArgs) -> anyhow::Result<ExitCode> {
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from("scenarios")]
    } else {
        args.paths
    };
    let definitions = scenario::definitions_in(&args.workflows)?;
    let bench = bench(&definitions, &args.components).await?;
    let files = scenario::scenario_files(&paths)?;
    let (cases, errors) = scenario::load(&files, &definitions, bench.components())?;
    for e in &errors {
        eprintln!("{e}\n");
    }
    let bar = (std::io::stderr().is_terminal() && cases.len() > 1).then(|| {
        let bar = indicatif::ProgressBar::new(cases.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {wide_msg}")
                .expect("a valid template"),
        );
        bar
    });
    let mut outcomes = Vec::new();
    for case in &cases {
        if let Some(bar) = &bar {
            bar.set_message(case.name.clone());
        }
        crate::entropy::seed(Some(args.seed));
        outcomes.push(scenario::run(&bench, case).await?);
        crate::entropy::seed(None);
        if let Some(bar) = &bar {
            bar.inc(1);
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    for o in outcomes.iter().filter(|o| !o.passed()) {
        println!("{}", scenario::details(o));
    }
    print!("{}", scenario::table(&outcomes));
    if !errors.is_empty() {
        println!("{} scenario files are invalid (above)", errors.len());
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, scenario::junit(&outcomes))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let failed = !errors.is_empty() || outcomes.iter().any(|o| !o.passed());
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `docket scenario explore`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ExploreArgs {
    /// The workflow to explore; the first scenario of it in `--scenarios` gives its intents
    /// and providers.
    pub workflow: String,
    /// How many seeds to run.
    #[arg(long, default_value_t = 1000)]
    pub seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    pub from: u64,
    /// Stop starting new seeds after this long (e.g. `2m`); all of them when unset.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub budget: Option<std::time::Duration>,
    /// Where the base scenarios are.
    #[arg(long, default_value = "scenarios")]
    pub scenarios: PathBuf,
    /// Seeds that once broke an invariant, run first every time (default:
    /// `<scenarios>/regressions/seeds.toml`, when it exists).
    #[arg(long, value_name = "FILE")]
    pub regressions: Option<PathBuf>,
    /// The workflow definitions.
    #[arg(long, default_value = "workflows")]
    pub workflows: PathBuf,
    /// Component files (`.wasm`) besides the examples built into docket.
    #[arg(long = "components", value_name = "FILE")]
    pub components: Vec<PathBuf>,
    /// Print every seed's schedule and how long it took, not only the failing ones'.
    #[arg(long)]
    pub verbose: bool,
    /// Write each seed's trace — what it injected, what the run did, the final projections,
    /// timelines and world record — as one JSON line to this file; the same seed writes the
    /// same line.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// A deliberately broken host, to show exploration finds what it should (test control):
    /// `blind-retry` retries an unknown outcome without asking the adapter's contract.
    #[arg(long, hide = true)]
    pub broken_host: Option<String>,
}

/// The regression file: seeds that once broke an invariant, kept so they run every time.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Regressions {
    #[serde(default)]
    seed: Vec<Regression>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Regression {
    workflow: String,
    seed: u64,
    /// What it broke and what fixed it, for people.
    #[allow(dead_code)]
    broke: String,
}

/// The regression seeds of the workflow explored, in the file's order.
fn regression_seeds(args: &ExploreArgs) -> anyhow::Result<Vec<u64>> {
    let (path, given) = match &args.regressions {
        Some(p) => (p.clone(), true),
        None => (args.scenarios.join("regressions").join("seeds.toml"), false),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if !given && e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let file: Regressions = toml::from_str(&text).with_context(|| {
        format!(
            "{} is not a regression file: write [[seed]] tables with workflow, seed and broke",
            path.display()
        )
    })?;
    let mut seeds: Vec<u64> = Vec::new();
    for r in file.seed.iter().filter(|r| r.workflow == args.workflow) {
        if !seeds.contains(&r.seed) {
            seeds.push(r.seed);
        }
    }
    Ok(seeds)
}

/// Explores seeded fault schedules; exit status 1 when a seed breaks an invariant.
pub async fn explore(args: ExploreArgs) -> anyhow::Result<ExitCode> {
    on_one_thread(args, explore_here).await
}

async fn explore_here(args: ExploreArgs) -> anyhow::Result<ExitCode> {
    let definitions = scenario::definitions_in(&args.workflows)?;
    let Some((_, _, def)) = definitions.get(&args.workflow) else {
        anyhow::bail!(
            "no workflow named `{}` in {}",
            args.workflow,
            args.workflows.display()
        );
    };
    let broken = match args.broken_host.as_deref() {
        None => false,
        Some("blind-retry") => true,
        Some(other) => {
            anyhow::bail!("unknown --broken-host `{other}`; the one known is blind-retry")
        }
    };
    let adapter_steps: Vec<String> = def
        .steps
        .iter()
        .filter(|s| s.kind == crate::workflow::StepKind::Adapter)
        .map(|s| s.id.to_string())
        .collect();
    let mut bench = bench(&definitions, &args.components).await?;
    if broken {
        bench.break_host_with_blind_retries();
    }
    let files = scenario::scenario_files(std::slice::from_ref(&args.scenarios))?;
    let (cases, errors) = scenario::load(&files, &definitions, bench.components())?;
    for e in &errors {
        eprintln!("{e}\n");
    }
    let Some(base) = cases.iter().find(|c| c.workflow == args.workflow) else {
        anyhow::bail!(
            "no scenario in {} runs `{}`: write one (its intents and providers are what the schedules vary)",
            args.scenarios.display(),
            args.workflow
        );
    };
    let regressions = regression_seeds(&args)?;
    let started = std::time::Instant::now();
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(args.seeds + regressions.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} seeds {per_sec} {wide_msg}",
            )
            .expect("a valid template"),
        );
        bar
    });
    let mut ran = 0u64;
    let mut failed = Vec::new();
    let mut trace = match &args.trace {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        )),
        None => None,
    };
    let range = args.from..args.from.saturating_add(args.seeds);
    let earlier: Vec<u64> = regressions
        .iter()
        .copied()
        .filter(|s| !range.contains(s))
        .collect();
    let regressed = earlier.len();
    for (n, seed) in earlier.into_iter().chain(range).enumerate() {
        // The regression seeds always run; the budget bounds the range.
        if n >= regressed && args.budget.is_some_and(|b| started.elapsed() >= b) {
            break;
        }
        let schedule = scenario::explore::schedule(seed, base, &adapter_steps);
        // Ids and jitter come from the seed too, so the run repeats.
        crate::entropy::seed(Some(seed));
        let outcome = scenario::explore_one(&bench, &schedule.scenario).await;
        crate::entropy::seed(None);
        let outcome = outcome?;
        ran += 1;
        if let Some(out) = trace.as_mut() {
            use std::io::Write as _;
            let line = serde_json::json!({
                "seed": seed,
                "injected": schedule.injected,
                "log": outcome.log,
                "projections": scenario::explore::traced(&outcome.projections),
                "timelines": outcome.timelines,
                "world": outcome.world,
            });
            writeln!(out, "{line}")?;
        }
        if let Some(bar) = &bar {
            bar.inc(1);
        }
        if args.verbose && outcome.passed() {
            let text = format!(
                "seed {seed} ({} ms): {}",
                outcome.real_ms,
                if schedule.injected.is_empty() {
                    "nothing injected".to_string()
                } else {
                    schedule.injected.join("; ")
                }
            );
            match &bar {
                Some(bar) => bar.suspend(|| println!("{text}")),
                None => println!("{text}"),
            }
        }
        if !outcome.passed() {
            let report =
                scenario::explore::replay_report(&args.workflow, &schedule, &outcome.failures);
            if let Some(bar) = &bar {
                bar.suspend(|| println!("{report}"));
            } else {
                println!("{report}");
            }
            failed.push(seed);
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(mut out) = trace {
        use std::io::Write as _;
        out.flush()?;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{ran} schedules of {} explored from seed {}{} in {secs:.1} s ({:.1} schedules/s): {} broke an invariant{}",
        args.workflow,
        args.from,
        if regressed > 0 {
            format!(" and {regressed} regression seeds")
        } else {
            String::new()
        },
        ran as f64 / secs.max(1e-9),
        failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(
                " (seeds {})",
                failed
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    Ok(if failed.is_empty() && errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
