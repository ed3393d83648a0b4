//! The `mesgd` command line.

fn main() {}
