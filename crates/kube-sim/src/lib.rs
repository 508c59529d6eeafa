//! Placeholder; filled in by its issue.
pub mod openapi;
pub mod patch;
pub mod table;
