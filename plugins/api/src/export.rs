//! The plugin side of the ABI: the `extern "C"` trampolines that [`export_plugin!`] puts into a
//! plugin library, over a type that implements [`Plugin`].
//!
//! This module is the only place of the crate with `unsafe` code. Every trampoline catches
//! panics (`catch_unwind`): unwinding into the host's C frames would abort the broker, while a
//! caught panic becomes an error status with the panic message, which the host turns into a
//! denied client and a log line.
//!
//! [`export_plugin!`]: crate::export_plugin

use std::any::Any;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::abi::{
    ABI_MAJOR, ABI_VERSION, MAX_NAME_LEN, MesgdBuffer, MesgdPluginV1, RESERVED_SLOTS, STATUS_ERROR,
    STATUS_OK, TextFn, V1_STRUCT_SIZE, abi_major,
};
use crate::{Plugin, Request};

/// The buffer that holds a NUL-terminated name or version text.
pub type CText = [u8; MAX_NAME_LEN + 1];

/// Copies `text` into a NUL-terminated array at compile time; refuses (fails the build) text
/// that is too long or holds a NUL.
pub const fn c_text(text: &str) -> CText {
    let bytes = text.as_bytes();
    assert!(bytes.len() <= MAX_NAME_LEN, "mesgd plugin: a name or version is longer than 64 bytes");
    let mut out = [0u8; MAX_NAME_LEN + 1];
    let mut i = 0;
    while i < bytes.len() {
        assert!(bytes[i] != 0, "mesgd plugin: a name or version contains a NUL byte");
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// [`c_text`] for [`Plugin::NAME`], which must also be 1 to 64 bytes of `A-Z a-z 0-9 _ . -`.
pub const fn plugin_name(name: &str) -> CText {
    let bytes = name.as_bytes();
    assert!(!bytes.is_empty(), "mesgd plugin: Plugin::NAME is empty");
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        assert!(
            b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-',
            "mesgd plugin: Plugin::NAME may only contain A-Z a-z 0-9 _ . -"
        );
        i += 1;
    }
    c_text(name)
}

/// The function table for `P`, with the name and version functions the macro generated.
pub const fn vtable<P: Plugin>(name: TextFn, version: TextFn) -> MesgdPluginV1 {
    MesgdPluginV1 {
        abi_version: ABI_VERSION,
        struct_size: V1_STRUCT_SIZE as u32,
        name: Some(name),
        version: Some(version),
        create: Some(create::<P>),
        authenticate: Some(authenticate::<P>),
        free_buffer: Some(free_buffer),
        destroy: Some(destroy::<P>),
        reserved: [None; RESERVED_SLOTS],
    }
}

/// The handshake: the table for a host of the same major version, NULL for any other.
pub fn entry(host_abi_version: u32, vtable: &'static MesgdPluginV1) -> *const MesgdPluginV1 {
    if abi_major(host_abi_version) == ABI_MAJOR { vtable } else { std::ptr::null() }
}

/// The text of a panic payload (`panic!` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn Any + Send)) -> String {
    let detail = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-text payload");
    format!("the plugin panicked: {detail}")
}

/// Hands `bytes` to the host through `out`, which the host frees with [`free_buffer`].
///
/// # Safety
///
/// `out` must be NULL or valid for a write of one `MesgdBuffer`.
unsafe fn hand_out(out: *mut MesgdBuffer, bytes: Vec<u8>) {
    if out.is_null() {
        return;
    }
    let boxed = bytes.into_boxed_slice();
    let len = boxed.len();
    let ptr = Box::into_raw(boxed).cast::<u8>();
    // SAFETY: the caller guarantees `out` is valid for writes; it is not NULL (checked above).
    unsafe { out.write(MesgdBuffer { ptr, len }) };
}

/// The bytes the host passed in.
///
/// # Safety
///
/// Unless NULL, `ptr` must point to `len` initialised bytes that stay valid and unchanged for
/// `'a` (the host's call).
unsafe fn borrowed<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], String> {
    if ptr.is_null() {
        return if len == 0 { Ok(&[]) } else { Err("the host passed a NULL buffer".to_owned()) };
    }
    // SAFETY: the caller guarantees `len` readable bytes at `ptr` for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// `create`: parses the config JSON, calls [`Plugin::create`] and boxes the instance.
///
/// # Safety
///
/// The host passes `config_len` readable bytes at `config_json`, and `out_instance` /
/// `out_error` valid for one write each.
unsafe extern "C" fn create<P: Plugin>(
    config_json: *const u8,
    config_len: usize,
    out_instance: *mut *mut c_void,
    out_error: *mut MesgdBuffer,
) -> i32 {
    if out_instance.is_null() {
        return STATUS_ERROR;
    }
    let created = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the host's promise, passed on (see this function's contract).
        let bytes = unsafe { borrowed(config_json, config_len) }?;
        let config = serde_json::from_slice(bytes).map_err(|e| format!("the config is not JSON: {e}"))?;
        P::create(config).map_err(|e| e.to_string())
    }))
    .unwrap_or_else(|payload| Err(panic_message(&*payload)));
    match created {
        Ok(plugin) => {
            let instance = Box::into_raw(Box::new(plugin)).cast::<c_void>();
            // SAFETY: `out_instance` is valid for writes (contract) and not NULL (checked).
            unsafe { out_instance.write(instance) };
            STATUS_OK
        }
        Err(message) => {
            // SAFETY: `out_error` is NULL or valid for writes (contract).
            unsafe { hand_out(out_error, message.into_bytes()) };
            STATUS_ERROR
        }
    }
}

/// `authenticate`: parses the request, calls [`Plugin::authenticate`], serializes the answer.
///
/// # Safety
///
/// `instance` came from this plugin's `create` for the same `P` and was not destroyed;
/// `request_len` readable bytes at `request_json`; `out_response` valid for one write.
unsafe extern "C" fn authenticate<P: Plugin>(
    instance: *mut c_void,
    request_json: *const u8,
    request_len: usize,
    out_response: *mut MesgdBuffer,
) -> i32 {
    if instance.is_null() {
        // SAFETY: `out_response` is NULL or valid for writes (contract).
        unsafe { hand_out(out_response, b"the host passed a NULL instance".to_vec()) };
        return STATUS_ERROR;
    }
    let answered = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `instance` is a live `Box<P>` made by `create::<P>` (contract); the host
        // only shares it between calls, never mutably, and `P: Sync`.
        let plugin = unsafe { &*instance.cast::<P>() };
        // SAFETY: the host's promise, passed on (see this function's contract).
        let bytes = unsafe { borrowed(request_json, request_len) }?;
        let request: Request =
            serde_json::from_slice(bytes).map_err(|e| format!("the request is not valid: {e}"))?;
        let response = plugin.authenticate(&request).map_err(|e| e.to_string())?;
        serde_json::to_vec(&response).map_err(|e| format!("cannot encode the answer: {e}"))
    }))
    .unwrap_or_else(|payload| Err(panic_message(&*payload)));
    let (status, bytes) = match answered {
        Ok(json) => (STATUS_OK, json),
        Err(message) => (STATUS_ERROR, message.into_bytes()),
    };
    // SAFETY: `out_response` is NULL or valid for writes (contract).
    unsafe { hand_out(out_response, bytes) };
    status
}

/// `free_buffer`: releases what [`hand_out`] handed out.
///
/// # Safety
///
/// `ptr` and `len` are exactly a buffer this plugin handed out and not yet freed, or `ptr` is
/// NULL.
unsafe extern "C" fn free_buffer(ptr: *mut u8, len: usize) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: (`ptr`, `len`) is a `Box<[u8]>` made by `hand_out` and given back once (contract).
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
}

/// `destroy`: drops the instance.
///
/// # Safety
///
/// `instance` came from `create::<P>`, no call on it is running, and it is destroyed once.
unsafe extern "C" fn destroy<P: Plugin>(instance: *mut c_void) {
    if instance.is_null() {
        return;
    }
    // SAFETY: `instance` is a `Box<P>` from `create::<P>`, released once (contract).
    let plugin = unsafe { Box::from_raw(instance.cast::<P>()) };
    // A panicking `Drop` must not unwind into the host; there is nobody left to tell.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(plugin)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BoxError, Response};

    struct Echo {
        greeting: String,
    }

    impl Plugin for Echo {
        const NAME: &'static str = "echo";

        fn create(config: serde_json::Value) -> Result<Self, BoxError> {
            match config.get("greeting").and_then(|g| g.as_str()) {
                Some("panic") => panic!("asked to panic in create"),
                Some(greeting) => Ok(Echo { greeting: greeting.to_owned() }),
                None => Err("`greeting` is required".into()),
            }
        }

        fn authenticate(&self, request: &Request) -> Result<Response, BoxError> {
            match request.username.as_deref() {
                Some("boom") => panic!("boom for {}", request.client_id),
                Some("fail") => Err("backend unavailable".into()),
                Some(user) => Ok(Response::allow().with_username(format!("{}-{user}", self.greeting))),
                None => Ok(Response::next()),
            }
        }
    }

    extern "C" fn no_text() -> *const std::ffi::c_char {
        c"x".as_ptr()
    }

    static TABLE: MesgdPluginV1 = vtable::<Echo>(no_text, no_text);

    /// Calls `create` as a host would; Ok(instance) or Err(message).
    fn create_instance(config: &str) -> Result<*mut c_void, String> {
        let mut instance = std::ptr::null_mut();
        let mut error = MesgdBuffer::empty();
        let create = TABLE.create.expect("create");
        // SAFETY: valid pointers to locals and to `config`, alive for the call.
        let status = unsafe { create(config.as_ptr(), config.len(), &mut instance, &mut error) };
        if status == STATUS_OK { Ok(instance) } else { Err(take(error)) }
    }

    #[allow(clippy::needless_pass_by_value)] // by value: the buffer is given back here, once
    fn take(buffer: MesgdBuffer) -> String {
        // SAFETY: the buffer came from this plugin and is read, then freed, once.
        let text = String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(buffer.ptr, buffer.len) })
            .into_owned();
        // SAFETY: as above.
        unsafe { (TABLE.free_buffer.expect("free_buffer"))(buffer.ptr, buffer.len) };
        text
    }

    fn call(instance: *mut c_void, request: &str) -> (i32, String) {
        let mut out = MesgdBuffer::empty();
        // SAFETY: a live instance of this plugin and valid pointers for the call.
        let status = unsafe {
            (TABLE.authenticate.expect("authenticate"))(instance, request.as_ptr(), request.len(), &mut out)
        };
        (status, take(out))
    }

    #[test]
    fn the_trampolines_call_the_trait_and_contain_panics() {
        assert_eq!(create_instance("{}").unwrap_err(), "`greeting` is required");
        assert_eq!(
            create_instance("{not json").unwrap_err().split(':').next(),
            Some("the config is not JSON")
        );
        assert_eq!(
            create_instance(r#"{"greeting": "panic"}"#).unwrap_err(),
            "the plugin panicked: asked to panic in create"
        );
        let instance = create_instance(r#"{"greeting": "hi"}"#).expect("created");
        let request = |user: &str| {
            format!(r#"{{"client_id": "c9", "username": "{user}", "protocol": "mqtt-5", "listener": "l"}}"#)
        };
        assert_eq!(
            call(instance, &request("ann")),
            (STATUS_OK, r#"{"result":"allow","username":"hi-ann"}"#.into())
        );
        assert_eq!(call(instance, &request("fail")), (STATUS_ERROR, "backend unavailable".into()));
        assert_eq!(
            call(instance, &request("boom")),
            (STATUS_ERROR, "the plugin panicked: boom for c9".into())
        );
        let (status, message) = call(instance, r#"{"client_id": 1}"#);
        assert_eq!(status, STATUS_ERROR);
        assert!(message.starts_with("the request is not valid"), "{message}");
        // After a panic the instance still serves.
        assert_eq!(
            call(instance, r#"{"client_id": "c", "protocol": "p", "listener": "l"}"#).1,
            r#"{"result":"next"}"#
        );
        // SAFETY: created above, no call running, destroyed once.
        unsafe { (TABLE.destroy.expect("destroy"))(instance) };
    }

    #[test]
    fn the_handshake_answers_its_own_major_version_only() {
        assert!(!entry(ABI_VERSION, &TABLE).is_null());
        assert!(!entry(crate::abi::abi_version(ABI_MAJOR, 9), &TABLE).is_null());
        assert!(entry(crate::abi::abi_version(ABI_MAJOR + 1, 0), &TABLE).is_null());
        assert!(entry(0, &TABLE).is_null());
    }

    #[test]
    fn names_become_nul_terminated_text() {
        let name = plugin_name("allow-list_2.0");
        assert_eq!(&name[..15], b"allow-list_2.0\0");
        assert_eq!(c_text(&"v".repeat(64))[64], 0);
    }
}
