//! What people and clients are shown of a workflow, built from stored records by pure
//! functions: the projection (steps, milestones, receipts, status text), list summaries,
//! timeline entries, attempts, notifications and providers' observations. The API serialises these as JSON and the console renders
//! them as pages, so both say the same thing.

mod course;
mod evidence;
mod notifications;
mod projection;
mod status;
mod time;

pub use course::{
    CancellationProgress, CancellationView, CompensationProgress, CourseActionView,
    MigrationPlanView, MigrationView, MovedStepView, RevisionView, course_actions, course_steps,
};
pub use evidence::ObservationView;
pub use notifications::NotificationView;
pub use projection::{
    ApprovalView, AttemptView, CompensationView, ContractView, IntentView, ItemCounts, ItemView,
    MilestoneView, ProvenanceView, ReceiptView, StepView, SummaryView, TimelineView, WorkflowView,
    retention_deadline, shorten_identity, summary_view, workflow_view,
};
pub use status::{Milestone, NextAction, StepStatus, milestones, next_action, status_text};
pub use time::{rfc3339, rfc3339_opt};
