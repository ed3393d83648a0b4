//! The fuzz oracle for the relay scanner's nesting limit, shared by the corpus replay
//! ([`super::corpus`]) and the fuzz target `fuzz/fuzz_targets/relay_message.rs` (which includes
//! this file by path, so it uses nothing from the crate).

/// The deepest nesting of arrays and objects in the text `data`, strings skipped. Not the
/// parsed value's: a key given twice keeps only its last value there, while the scanner refuses
/// the nesting of the text, which an earlier value of that key may hold (the fuzzer's finding 7,
/// `fuzz/corpus/relay_message/finding_7_deep_repeated_key`).
pub(crate) fn depth(data: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in data {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}
