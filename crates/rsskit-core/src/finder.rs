//! Placeholder: filled in by the RSS core work (issue 2).
