//! Rehearsals: `docket scenario` runs a team's own workflows and components against
//! scripted providers, checkpoint kills, operator actions and a simulated clock, and checks
//! what the run ends with.
//!
//! Layout:
//! - `file.rs`: the scenario format (`scenarios/*.toml`) and its `file:line:col` checks;
//! - `provider.rs`: scripted providers, answered inside the runtime by host name, and the
//!   world record they keep;
//! - `engine.rs`: one case run in-process on a temporary SQLite store and a manual clock;
//! - `explore.rs`: schedules drawn from a seed over a base scenario, and the invariants
//!   every run keeps (`docket scenario explore`);
//! - `report.rs`: the table of cases, a failure's story, and JUnit XML.

mod engine;
pub mod explore;
mod file;
mod provider;
mod report;

pub use engine::{Bench, EngineError, Outcome, START_MS, explore as explore_one, run};
pub use file::{Event, EventAction, Expect, Intent, Kill, Scenario, StepExpect, parse};
pub use provider::{
    Behaviour, ProviderSpec, REFERENCE_DELIVERY, Resource, Route, RouteKind, ScriptedProviders,
};
pub use report::{details, junit, table};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::workflow::{Diagnostics, WorkflowDef};

/// Definition files of a directory: (file name, source, parsed definition), by workflow name.
pub type Definitions = BTreeMap<String, (String, String, WorkflowDef)>;

/// Why scenario inputs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("reading {path}: {cause}")]
    Read { path: String, cause: String },
    /// A definition the scenarios would run is itself invalid.
    #[error("{0}")]
    Definition(Diagnostics),
}

/// The definitions in `dir` (every `*.toml`).
pub fn definitions_in(dir: &Path) -> Result<Definitions, LoadError> {
    let mut out = BTreeMap::new();
    for path in toml_files(dir)? {
        let text = read(&path)?;
        let name = path.display().to_string();
        let def = crate::workflow::parse(&name, &text).map_err(LoadError::Definition)?;
        out.insert(def.name.to_string(), (name, text, def));
    }
    Ok(out)
}

/// The scenario files `paths` name: files as given, directories' `*.toml` sorted.
pub fn scenario_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            out.extend(toml_files(p)?);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Reads and checks each scenario file: the scenarios, and the diagnostics of those that
/// are not valid.
pub fn load(
    files: &[PathBuf],
    definitions: &Definitions,
    components: &[(String, String)],
) -> Result<(Vec<Scenario>, Vec<Diagnostics>), LoadError> {
    let defs: BTreeMap<String, WorkflowDef> = definitions
        .iter()
        .map(|(k, (_, _, d))| (k.clone(), d.clone()))
        .collect();
    let mut scenarios = Vec::new();
    let mut errors = Vec::new();
    for path in files {
        let text = read(path)?;
        match parse(&path.display().to_string(), &text, &defs, components) {
            Ok(found) => scenarios.extend(found),
            Err(d) => errors.push(d),
        }
    }
    Ok((scenarios, errors))
}

fn toml_files(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let entries = std::fs::read_dir(dir).map_err(|e| LoadError::Read {
        path: dir.display().to_string(),
        cause: e.to_string(),
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    Ok(files)
}

fn read(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|e| LoadError::Read {
        path: path.display().to_string(),
        cause: e.to_string(),
    })
}
