mod compile;
mod coverage;
mod fuzz_replay;
mod matcher;
mod paths;
mod scan;
mod support;
