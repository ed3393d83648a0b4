//! String runs sixteen bytes at a time with SSE2, on x86-64.
//!
//! SSE2 is part of the x86-64 baseline, but `core::arch`'s intrinsics are still `unsafe` to call
//! from a function without `#[target_feature(enable = "sse2")]` (and such a function is unsafe
//! to call from one without it), which this crate forbids. `safe_arch` wraps them as safe
//! functions wherever the feature is enabled at compile time, as SSE2 always is on x86-64. The
//! sixteen bytes are built from a `u128` read from the slice, never loaded through a pointer.
//! One block is classified with five vector operations and two mask extractions: the
//! bytes that stop a plain run (`"`, `\` and control characters, below U+0020) and the bytes of
//! 128 or more (which send a run through the UTF-8 validator). The same answers as the portable
//! word-at-a-time code in `string.rs` (property-tested there), with twice the bytes per step and
//! a single pass over long strings.
//!
//! A block that would run past the end of the input is padded with `"` bytes: a stop found in
//! the padding is reported at the input's end, where the caller finds no closing quote.

use super::string::SHORT_STRING;
use safe_arch::{
    bitor_m128i, cmp_eq_mask_i8_m128i, m128i, min_u8_m128i, move_mask_i8_m128i, set_splat_i8_m128i,
};

/// The sixteen bytes at `i`, padded with `"` past the end of `b`.
#[inline(always)]
fn block(b: &[u8], i: usize) -> u128 {
    match b.get(i..i + 16).and_then(|s| <[u8; 16]>::try_from(s).ok()) {
        Some(chunk) => u128::from_le_bytes(chunk),
        None => padded(b, i),
    }
}

#[cold]
#[inline(never)]
fn padded(b: &[u8], i: usize) -> u128 {
    let rest = b.get(i..).unwrap_or_default();
    let mut chunk = [b'"'; 16];
    let n = rest.len().min(16);
    chunk[..n].copy_from_slice(&rest[..n]);
    u128::from_le_bytes(chunk)
}

/// Bit n of the first mask is set when byte n of `block` is `"`, `\` or a control character;
/// bit n of the second when it is 128 or more.
#[inline(always)]
fn classify(block: u128) -> (u32, u32) {
    let v = m128i::from(block);
    let quote = cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(b'"' as i8));
    let backslash = cmp_eq_mask_i8_m128i(v, set_splat_i8_m128i(b'\\' as i8));
    // Unsigned `v <= 0x1f`: the minimum with 0x1f is `v` itself.
    let control = cmp_eq_mask_i8_m128i(min_u8_m128i(v, set_splat_i8_m128i(0x1f)), v);
    let stops = bitor_m128i(bitor_m128i(quote, backslash), control);
    // The masks have one bit per byte: sixteen bits, never negative.
    (move_mask_i8_m128i(stops) as u32, move_mask_i8_m128i(v) as u32)
}

/// The first `"`, `\` or control character at or after `i` (or the end of `b`), and whether a
/// byte of 128 or more lies before it.
#[inline(always)]
pub(super) fn find_special(b: &[u8], mut i: usize) -> (usize, bool) {
    let mut high = false;
    loop {
        let (stops, highs) = classify(block(b, i));
        if stops != 0 {
            let at = stops.trailing_zeros();
            high |= highs & ((1 << at) - 1) != 0;
            return ((i + at as usize).min(b.len()), high);
        }
        high |= highs != 0;
        i += 16;
    }
}

/// The end of a plain string whose body starts at `i`: the position of its closing quote when
/// the first `"`, `\`, control character or byte of 128 or more within [`SHORT_STRING`] bytes is
/// that quote. `None` sends the string to the general path.
#[inline(always)]
pub(super) fn plain_end(b: &[u8], i: usize) -> Option<usize> {
    for start in (i..i + SHORT_STRING).step_by(16) {
        let (stops, highs) = classify(block(b, start));
        let m = stops | highs;
        if m != 0 {
            let stop = start + m.trailing_zeros() as usize;
            return (b.get(stop) == Some(&b'"')).then_some(stop);
        }
    }
    None
}
