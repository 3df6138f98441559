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
}

/// Runs the scenarios; exit status 1 when a case fails or a file is invalid.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from("scenarios")]
    } else {
        args.paths
    };
    let definitions = scenario::definitions_in(&args.workflows)?;
    let mut components: Vec<(Vec<u8>, bool)> = crate::guests::EMBEDDED
        .iter()
        .map(|(_, bytes)| (bytes.to_vec(), true))
        .collect();
    for path in &args.components {
        let bytes =
            std::fs::read(path).with_context(|| format!("reading component {}", path.display()))?;
        components.push((bytes, false));
    }
    let bench = scenario::Bench::new(
        components,
        definitions
            .iter()
            .map(|(name, (file, text, _))| (name.clone(), (file.clone(), text.clone())))
            .collect(),
        super::adapter::cache_dir(),
    )
    .await?;
    let files = scenario::scenario_files(&paths)?;
    let (cases, errors) = scenario::load(&files, &definitions, bench.component_names())?;
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
        outcomes.push(scenario::run(&bench, case).await?);
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
