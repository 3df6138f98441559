//! Whether this host is ready for work: its supervised tasks, by name, and whether it is
//! stopping. The store's round trip is checked by whoever asks ([`crate::api`]'s `/readyz`).

use std::collections::BTreeMap;
use std::sync::Mutex;

/// The supervised tasks' states and the host's stop, shared by the supervisor (which
/// writes) and the readiness check (which reads).
#[derive(Debug, Default)]
pub struct Health {
    /// Each task by name: `None` while it runs, how it ended otherwise.
    tasks: Mutex<BTreeMap<&'static str, Option<String>>>,
    stopping: Mutex<Option<String>>,
}

impl Health {
    /// A task started.
    pub fn started(&self, task: &'static str) {
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(task, None);
    }

    /// A task ended, and how.
    pub fn ended(&self, task: &'static str, how: String) {
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(task, Some(how));
    }

    /// The host is stopping, and why.
    pub fn stopping(&self, why: impl Into<String>) {
        *self.stopping.lock().unwrap_or_else(|e| e.into_inner()) = Some(why.into());
    }

    /// The names of the tasks running.
    pub fn running(&self) -> Vec<&'static str> {
        let tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks
            .iter()
            .filter(|(_, end)| end.is_none())
            .map(|(name, _)| *name)
            .collect()
    }

    /// Why this host is not ready, as far as its own tasks tell (empty when it is).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(why) = &*self.stopping.lock().unwrap_or_else(|e| e.into_inner()) {
            problems.push(format!("stopping: {why}"));
        }
        let tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        for (name, end) in tasks.iter() {
            if let Some(how) = end {
                problems.push(format!("the `{name}` task ended: {how}"));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ended_task_and_a_stop_are_named() {
        let health = Health::default();
        health.started("scheduler");
        health.started("server");
        assert!(health.problems().is_empty());
        health.ended("scheduler", "it panicked: boom".into());
        health.stopping("the `scheduler` task ended");
        assert_eq!(
            health.problems(),
            vec![
                "stopping: the `scheduler` task ended".to_string(),
                "the `scheduler` task ended: it panicked: boom".to_string(),
            ]
        );
        assert_eq!(health.running(), vec!["server"]);
    }
}
