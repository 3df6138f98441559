//! The dependency graph of a definition's steps, as written: unknown and repeated `after`
//! entries, cycles (named step by step), and transitive dependencies for reference checks.
//!
//! Works on the raw steps so every diagnostic points at the `after` entry responsible.

use std::collections::{BTreeMap, BTreeSet};

use super::diagnostics::{Diagnostic, closest, list};
use super::raw::StepToml;

/// The steps' dependency edges, by definition index, with unknown entries removed.
pub(super) struct Graph {
    /// For each step, the indices of the steps in its `after`, each once, in order.
    deps: Vec<Vec<usize>>,
    /// For each step, whether its `after` names an unknown step.
    incomplete: Vec<bool>,
}

impl Graph {
    /// Builds the graph, reporting unknown, self and repeated `after` entries and every
    /// cycle. `index` maps each step id to its first definition index.
    pub fn build(
        steps: &[StepToml],
        index: &BTreeMap<&str, usize>,
        diags: &mut Vec<Diagnostic>,
    ) -> Self {
        let mut deps = Vec::with_capacity(steps.len());
        let mut incomplete = vec![false; steps.len()];
        for (i, step) in steps.iter().enumerate() {
            let id = step.id.get_ref().as_str();
            let mut mine: Vec<usize> = Vec::new();
            for entry in &step.after {
                let name = entry.get_ref().as_str();
                match index.get(name) {
                    None => {
                        incomplete[i] = true;
                        let help = match closest(name, index.keys().copied()) {
                            Some(near) => format!("did you mean `{near}`?"),
                            None => format!("the steps are {}", list(index.keys())),
                        };
                        diags.push(
                            Diagnostic::new(format!(
                                "step `{id}` runs after unknown step `{name}`"
                            ))
                            .at(entry.span())
                            .help(help),
                        );
                    }
                    Some(&j) if j == i => diags.push(
                        Diagnostic::new(format!("step `{id}` lists itself in `after`"))
                            .at(entry.span())
                            .help(format!(
                                "remove `{id}` from its own `after`; a step cannot wait for itself"
                            )),
                    ),
                    Some(&j) if mine.contains(&j) => diags.push(
                        Diagnostic::new(format!("step `{id}` lists `{name}` in `after` twice"))
                            .at(entry.span())
                            .help("remove the repeated entry"),
                    ),
                    Some(&j) => mine.push(j),
                }
            }
            deps.push(mine);
        }
        let graph = Self { deps, incomplete };
        graph.report_cycles(steps, diags);
        graph
    }

    /// Whether step `i`, or a step it runs after, names an unknown step in `after`; its
    /// dependencies are then not fully known.
    pub fn is_incomplete(&self, i: usize) -> bool {
        self.incomplete[i] || self.ancestors(i).iter().any(|&j| self.incomplete[j])
    }

    /// Every step that must finish before step `i` may start (transitively).
    pub fn ancestors(&self, i: usize) -> BTreeSet<usize> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<usize> = self.deps[i].clone();
        while let Some(j) = todo.pop() {
            if seen.insert(j) {
                todo.extend(&self.deps[j]);
            }
        }
        seen
    }

    /// Reports each cycle once, at the `after` entry that closes it, naming its steps in
    /// the order they would have to run.
    fn report_cycles(&self, steps: &[StepToml], diags: &mut Vec<Diagnostic>) {
        let mut state = vec![Visit::New; steps.len()];
        let mut stack = Vec::new();
        let mut reported: BTreeSet<BTreeSet<usize>> = BTreeSet::new();
        for start in 0..steps.len() {
            self.visit(start, &mut state, &mut stack, &mut |cycle: &[usize]| {
                let members: BTreeSet<usize> = cycle.iter().copied().collect();
                if !reported.insert(members) {
                    return;
                }
                diags.push(cycle_diagnostic(steps, cycle));
            });
        }
    }

    /// Depth-first search along `after`; calls `found` with the stack slice of each cycle
    /// met through a back edge (each step depends on the next, the last on the first).
    fn visit(
        &self,
        i: usize,
        state: &mut [Visit],
        stack: &mut Vec<usize>,
        found: &mut dyn FnMut(&[usize]),
    ) {
        match state[i] {
            Visit::Done => return,
            Visit::OnStack => {
                let from = stack.iter().position(|&s| s == i).unwrap_or(0);
                found(&stack[from..]);
                return;
            }
            Visit::New => {}
        }
        state[i] = Visit::OnStack;
        stack.push(i);
        for &j in &self.deps[i] {
            self.visit(j, state, stack, found);
        }
        stack.pop();
        state[i] = Visit::Done;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Visit {
    New,
    OnStack,
    Done,
}

/// `cycle[k]` lists `cycle[k + 1]` in `after`, and the last lists the first. The message
/// names the steps in run order, starting from the earliest-defined one.
fn cycle_diagnostic(steps: &[StepToml], cycle: &[usize]) -> Diagnostic {
    let mut run_order: Vec<usize> = cycle.iter().rev().copied().collect();
    let first = run_order
        .iter()
        .enumerate()
        .min_by_key(|(_, i)| **i)
        .map_or(0, |(k, _)| k);
    run_order.rotate_left(first);
    let id = |i: usize| steps[i].id.get_ref().as_str();
    let mut names: Vec<&str> = run_order.iter().map(|&i| id(i)).collect();
    names.push(names[0]);
    // Point at the edge into the earliest-defined step: its successor lists it in `after`.
    let (head, next) = (run_order[0], run_order[1 % run_order.len()]);
    let span = steps[next]
        .after
        .iter()
        .find(|a| a.get_ref().as_str() == id(head))
        .map(|a| a.span());
    Diagnostic::new(format!("dependency cycle: {}", names.join(" -> ")))
        .at(span)
        .help(format!(
            "each step in the cycle waits for the one before it, so none can start; remove \
             `{}` from the `after` of step `{}` (or another edge of the cycle)",
            id(head),
            id(next)
        ))
}
