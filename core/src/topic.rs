//! Validated topic names and topic filters.
