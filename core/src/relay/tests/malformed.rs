//! The malformed-input table of the parser: every way a frame can be refused, with the exact
//! `msg` the client gets back; and the table of well-formed messages with their fields.

use std::borrow::Cow;

use crate::relay::client::{ClientMessage, ParseError, parse};
use crate::relay::error::{RelayError, msg};

fn refusal(frame: &[u8]) -> Option<String> {
    parse(frame).err().map(|e| e.relay_error().message().into_owned())
}

#[test]
fn malformed_table() {
    let long = "a".repeat(257);
    let long_to = format!(r#"{{"t":"send","to":"{long}","ct":""}}"#);
    let long_game = format!(r#"{{"t":"find_match","game":"{long}"}}"#);
    let deep_pipe = format!(r#"{{"t":"pipe_data","pipe_id":"p","x":{}{}}}"#, "[".repeat(64), "]".repeat(64));
    let cases: Vec<(&str, &[u8], &str)> = vec![
        // Not JSON, or not an object: `invalid json` on every transport.
        ("empty frame", b"", msg::INVALID_JSON),
        ("whitespace only", b" \r\n\t", msg::INVALID_JSON),
        ("not UTF-8", b"{\"t\":\"send\xff\"}", msg::INVALID_JSON),
        ("overlong UTF-8", b"{\"t\":\"\xc0\xaf\"}", msg::INVALID_JSON),
        ("an array", b"[]", msg::INVALID_JSON),
        ("a string", b"\"send\"", msg::INVALID_JSON),
        ("a number", b"42", msg::INVALID_JSON),
        ("null", b"null", msg::INVALID_JSON),
        ("unclosed object", b"{\"t\":\"send\"", msg::INVALID_JSON),
        ("two objects", b"{}{}", msg::INVALID_JSON),
        ("trailing garbage", b"{\"t\":\"capabilities\"} x", msg::INVALID_JSON),
        ("trailing comma", b"{\"t\":\"capabilities\",}", msg::INVALID_JSON),
        ("missing colon", b"{\"t\" \"capabilities\"}", msg::INVALID_JSON),
        ("unquoted key", b"{t:\"capabilities\"}", msg::INVALID_JSON),
        ("single quotes", b"{'t':'capabilities'}", msg::INVALID_JSON),
        ("raw newline in string", b"{\"t\":\"capa\nbilities\"}", msg::INVALID_JSON),
        ("bad escape", b"{\"t\":\"\\x\"}", msg::INVALID_JSON),
        ("short unicode escape", b"{\"t\":\"\\u12\"}", msg::INVALID_JSON),
        ("lone high surrogate", b"{\"t\":\"ack\",\"to\":\"\\ud800\",\"id\":\"1\"}", msg::INVALID_JSON),
        ("lone low surrogate", b"{\"t\":\"\\udc00\"}", msg::INVALID_JSON),
        ("leading zero", b"{\"t\":\"capabilities\",\"n\":01}", msg::INVALID_JSON),
        ("bare minus", b"{\"t\":\"capabilities\",\"n\":-}", msg::INVALID_JSON),
        ("dot without digits", b"{\"t\":\"capabilities\",\"n\":1.}", msg::INVALID_JSON),
        ("exponent without digits", b"{\"t\":\"capabilities\",\"n\":1e}", msg::INVALID_JSON),
        ("misspelt literal", b"{\"t\":\"capabilities\",\"n\":tru}", msg::INVALID_JSON),
        ("NaN", b"{\"t\":\"capabilities\",\"n\":NaN}", msg::INVALID_JSON),
        ("nesting over 64 levels", deep_pipe.as_bytes(), msg::INVALID_JSON),
        ("unclosed nested array", b"{\"t\":\"pipe_data\",\"pipe_id\":\"p\",\"x\":[1,2}", msg::INVALID_JSON),
        // An object, but `t` does not name a message type.
        ("no t", b"{}", msg::UNKNOWN_MESSAGE_TYPE),
        ("t a number", b"{\"t\":1}", msg::UNKNOWN_MESSAGE_TYPE),
        ("t null", b"{\"t\":null}", msg::UNKNOWN_MESSAGE_TYPE),
        ("t unknown", b"{\"t\":\"teleport\"}", msg::UNKNOWN_MESSAGE_TYPE),
        ("t in another case", b"{\"t\":\"Send\"}", msg::UNKNOWN_MESSAGE_TYPE),
        ("t a relay-to-client type", b"{\"t\":\"deliver\"}", msg::UNKNOWN_MESSAGE_TYPE),
        ("t twice", b"{\"t\":\"capabilities\",\"t\":\"list_online\"}", msg::UNKNOWN_MESSAGE_TYPE),
        ("T instead of t", b"{\"T\":\"capabilities\"}", msg::UNKNOWN_MESSAGE_TYPE),
        // A known type with a field missing, of the wrong type, or repeated.
        ("send without to", b"{\"t\":\"send\",\"ct\":\"x\"}", "invalid field: to"),
        ("send without ct", b"{\"t\":\"send\",\"to\":\"bob\"}", "invalid field: ct"),
        ("send with to a number", b"{\"t\":\"send\",\"to\":5,\"ct\":\"x\"}", "invalid field: to"),
        ("send with to null", b"{\"t\":\"send\",\"to\":null,\"ct\":\"x\"}", "invalid field: to"),
        ("send with ct an object", b"{\"t\":\"send\",\"to\":\"bob\",\"ct\":{}}", "invalid field: ct"),
        (
            "send with id a number",
            b"{\"t\":\"send\",\"to\":\"bob\",\"ct\":\"x\",\"id\":7}",
            "invalid field: id",
        ),
        (
            "send with pub an array",
            b"{\"t\":\"send\",\"to\":\"bob\",\"ct\":\"x\",\"pub\":[]}",
            "invalid field: pub",
        ),
        (
            "send with nonce true",
            b"{\"t\":\"send\",\"to\":\"bob\",\"ct\":\"x\",\"nonce\":true}",
            "invalid field: nonce",
        ),
        (
            "send with to twice",
            b"{\"t\":\"send\",\"to\":\"a\",\"to\":\"b\",\"ct\":\"x\"}",
            "invalid field: to",
        ),
        ("ack without id", b"{\"t\":\"ack\",\"to\":\"bob\"}", "invalid field: id"),
        ("ack without to", b"{\"t\":\"ack\",\"id\":\"1\"}", "invalid field: to"),
        ("register with addr a number", b"{\"t\":\"register\",\"addr\":1}", "invalid field: addr"),
        ("register with pubkey false", b"{\"t\":\"register\",\"pubkey\":false}", "invalid field: pubkey"),
        (
            "register with password a number",
            b"{\"t\":\"register\",\"addr\":\"a\",\"password\":1}",
            "invalid field: password",
        ),
        ("open_pipe without to", b"{\"t\":\"open_pipe\"}", "invalid field: to"),
        ("pipe_data without pipe_id", b"{\"t\":\"pipe_data\",\"x\":1}", "invalid field: pipe_id"),
        ("pipe_data with pipe_id a number", b"{\"t\":\"pipe_data\",\"pipe_id\":1}", "invalid field: pipe_id"),
        ("close_pipe without pipe_id", b"{\"t\":\"close_pipe\"}", "invalid field: pipe_id"),
        ("find_match without game", b"{\"t\":\"find_match\"}", "invalid field: game"),
        ("find_match with an empty game", b"{\"t\":\"find_match\",\"game\":\"\"}", "invalid field: game"),
        ("find_match with a 257-character game", long_game.as_bytes(), "invalid field: game"),
        ("join_room without room", b"{\"t\":\"join_room\"}", "invalid field: room"),
        ("join_room with room an array", b"{\"t\":\"join_room\",\"room\":[\"a\"]}", "invalid field: room"),
        ("room_send without ct", b"{\"t\":\"room_send\",\"room\":\"r\"}", "invalid field: ct"),
        ("room_send without room", b"{\"t\":\"room_send\",\"ct\":\"x\"}", "invalid field: room"),
        ("subscribe without topic", b"{\"t\":\"subscribe\"}", "invalid field: topic"),
        ("unsubscribe with topic a number", b"{\"t\":\"unsubscribe\",\"topic\":3}", "invalid field: topic"),
        ("publish without ct", b"{\"t\":\"publish\",\"topic\":\"a\"}", "invalid field: ct"),
        (
            "publish with retain a string",
            b"{\"t\":\"publish\",\"topic\":\"a\",\"ct\":\"\",\"retain\":\"yes\"}",
            "invalid field: retain",
        ),
        (
            "publish with retain 1",
            b"{\"t\":\"publish\",\"topic\":\"a\",\"ct\":\"\",\"retain\":1}",
            "invalid field: retain",
        ),
        // Address fields: empty or over 256 characters.
        ("send to an empty address", b"{\"t\":\"send\",\"to\":\"\",\"ct\":\"x\"}", msg::INVALID_ADDRESS),
        ("send to 257 characters", long_to.as_bytes(), msg::INVALID_ADDRESS),
        ("register an empty address", b"{\"t\":\"register\",\"addr\":\"\"}", msg::INVALID_ADDRESS),
        ("ack to an empty address", b"{\"t\":\"ack\",\"to\":\"\",\"id\":\"1\"}", msg::INVALID_ADDRESS),
        ("open_pipe to an empty address", b"{\"t\":\"open_pipe\",\"to\":\"\"}", msg::INVALID_ADDRESS),
    ];
    for (name, frame, expected) in cases {
        assert_eq!(refusal(frame).as_deref(), Some(expected), "{name}");
    }
}

#[test]
fn invalid_json_reports_where() {
    assert_eq!(
        parse(b"{\"t\" 1}"),
        Err(ParseError::InvalidJson { offset: 5, expected: "':' after the key" })
    );
    assert!(matches!(parse(b"ab\xff"), Err(ParseError::InvalidJson { offset: 2, .. })));
    assert_eq!(ParseError::InvalidField("to").relay_error(), RelayError::InvalidField("to"));
}

#[test]
fn well_formed_table() {
    let parsed = |frame: &'static [u8]| {
        parse(frame).unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(frame)))
    };

    let ClientMessage::Register(r) = parsed(br#"{"t":"register","addr":"alice","pubkey":"AQ==","sig":"c2ln","username":"u","password":"hunter2","token":"tok-secret"}"#) else {
        panic!("register")
    };
    assert_eq!(
        (r.addr.as_deref(), r.pubkey.as_deref(), r.sig.as_deref(), r.username.as_deref()),
        (Some("alice"), Some("AQ=="), Some("c2ln"), Some("u"))
    );
    assert_eq!((r.password.as_deref(), r.token.as_deref()), (Some("hunter2"), Some("tok-secret")));
    let shown = format!("{r:?}");
    assert!(!shown.contains("hunter2") && !shown.contains("tok-secret"), "{shown}");

    let ClientMessage::Register(r) = parsed(br#"{"t":"register","pubkey":"AQ==","addr":null}"#) else {
        panic!()
    };
    assert_eq!((r.addr, r.pubkey.as_deref()), (None, Some("AQ==")));

    let ClientMessage::Send(s) = parsed(br#"{"ct":"hi","to":"b\u00f6b","t":"send","extra":[1,{"x":null}]}"#)
    else {
        panic!("send")
    };
    assert_eq!(s.to, "böb");
    assert_eq!(s.ct.to_text(), "hi");
    assert_eq!((s.public_key, s.nonce, s.id), (None, None, None));

    let ClientMessage::Send(s) =
        parsed(br#"{"t":"send","to":"bob","ct":"c","pub":"P","nonce":"N","id":"7"}"#)
    else {
        panic!()
    };
    let texts = [s.public_key, s.nonce, s.id].map(|v| v.map(|v| v.to_text().into_owned()));
    assert_eq!(texts, [Some("P".into()), Some("N".into()), Some("7".into())]);

    assert_eq!(
        parsed(br#"{"t":"ack","to":"alice","id":"7"}"#),
        ClientMessage::Ack { to: Cow::Borrowed("alice"), id: crate::relay::JsonStr::literal("\"7\"", false) }
    );
    for (frame, expected) in [
        (&br#"{"t":"capabilities"}"#[..], ClientMessage::Capabilities),
        (br#" { "t" : "list_online" } "#, ClientMessage::ListOnline),
        (br#"{"t":"turn_credentials"}"#, ClientMessage::TurnCredentials),
        (br#"{"t":"challenge"}"#, ClientMessage::Challenge),
        (br#"{"t":"open_pipe","to":"bob"}"#, ClientMessage::OpenPipe { to: "bob".into() }),
        (br#"{"t":"close_pipe","pipe_id":"p1"}"#, ClientMessage::ClosePipe { pipe_id: "p1".into() }),
        (br#"{"t":"find_match","game":"chess"}"#, ClientMessage::FindMatch { game: "chess".into() }),
        (br#"{"t":"join_room","room":"lobby"}"#, ClientMessage::JoinRoom { room: "lobby".into() }),
        (br#"{"t":"subscribe","topic":"sensors/+"}"#, ClientMessage::Subscribe { topic: "sensors/+".into() }),
        (br#"{"t":"unsubscribe","topic":"a/#"}"#, ClientMessage::Unsubscribe { topic: "a/#".into() }),
    ] {
        assert_eq!(parsed(frame), expected);
    }

    let ClientMessage::RoomSend { room, ct } = parsed(br#"{"t":"room_send","room":"lobby","ct":"yo"}"#)
    else {
        panic!()
    };
    assert_eq!((&*room, &*ct.to_text()), ("lobby", "yo"));

    let ClientMessage::Publish { topic, ct, retain } =
        parsed(br#"{"t":"publish","topic":"s/1","ct":"21","retain":true}"#)
    else {
        panic!()
    };
    assert_eq!((&*topic, &*ct.to_text(), retain), ("s/1", "21", true));
    let ClientMessage::Publish { retain, .. } =
        parsed(br#"{"t":"publish","topic":"s/1","ct":"21","retain":null}"#)
    else {
        panic!()
    };
    assert!(!retain);

    let ClientMessage::PipeData(d) =
        parsed(br#"{"seq":1,"t":"pipe_data","data":{"a":[true]},"pipe_id":"p9","s":"\n"}"#)
    else {
        panic!()
    };
    assert_eq!(d.pipe_id, "p9");
    assert_eq!(d.fields.as_slice(), [r#""seq":1"#, r#""data":{"a":[true]}"#, r#""s":"\n""#]);
}

#[test]
fn an_escaped_t_is_still_t() {
    assert_eq!(parse(br#"{"\u0074":"capabilities"}"#), Ok(ClientMessage::Capabilities));
    assert_eq!(parse(br#"{"t":"capabilit\u0069es"}"#), Ok(ClientMessage::Capabilities));
}

#[test]
fn classification() {
    let reg = parse(br#"{"t":"register","addr":"a"}"#).unwrap();
    let send = parse(br#"{"t":"send","to":"b","ct":""}"#).unwrap();
    let close = parse(br#"{"t":"close_pipe","pipe_id":"p"}"#).unwrap();
    let unsub = parse(br#"{"t":"unsubscribe","topic":"a"}"#).unwrap();
    let caps = parse(br#"{"t":"capabilities"}"#).unwrap();
    let turn = parse(br#"{"t":"turn_credentials"}"#).unwrap();
    assert!(!reg.needs_registration() && !caps.needs_registration());
    assert!(send.needs_registration() && turn.needs_registration() && close.needs_registration());
    assert!(close.is_teardown() && unsub.is_teardown());
    assert!(!send.is_teardown() && !reg.is_teardown());
    assert_eq!((send.type_name(), unsub.type_name()), ("send", "unsubscribe"));
}

#[test]
fn debug_never_shows_ct() {
    let send = parse(br#"{"t":"send","to":"bob","ct":"top secret"}"#).unwrap();
    assert!(!format!("{send:?}").contains("secret"));
}
