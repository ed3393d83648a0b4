//! `config/mesgd.toml` documents every configuration key. The list of keys comes from the
//! configuration types themselves: every table refuses unknown keys, and its refusal names every
//! key it accepts, so probing each table with an unknown key enumerates the whole schema.

use mesgd::config::Config;

const REFERENCE: &str = include_str!("../config/mesgd.toml");
const LISTENER: &str = "kind = \"mqtt\"\nbind = \"127.0.0.1:0\"\n";

/// The keys the table at `header` accepts (with `prefix` text before the probe, for tables
/// that need required keys first), or `None` if the value there is not a table of known keys.
fn keys_of(header: &str, prefix: &str) -> Option<Vec<String>> {
    let probe = format!("{prefix}zz_probe = 1\n");
    let text = if header.is_empty() {
        format!("{probe}[[listeners]]\n{LISTENER}")
    } else if header.starts_with("[[listeners]]") {
        format!("{header}\n{probe}")
    } else {
        format!("[[listeners]]\n{LISTENER}{header}\n{probe}")
    };
    let err = Config::from_toml(&text, None).err()?.to_string();
    let (_, list) = err.split_once("unknown field `zz_probe`, expected ")?;
    let keys: Vec<String> = list.split('`').skip(1).step_by(2).map(str::to_owned).collect();
    (!keys.is_empty()).then_some(keys)
}

/// The text of the reference file's section `name` (from its header to the next header).
fn section(name: &str) -> String {
    let mut out = String::new();
    let mut inside = name.is_empty();
    for line in REFERENCE.lines() {
        let trimmed = line.trim_start_matches('#').trim();
        // A table that is off unless configured (`[cluster]`) is documented commented out.
        let is_header = (line.starts_with('[') || (line.starts_with("# [") && !line.starts_with("# [[")))
            && trimmed.ends_with(']');
        if is_header {
            let header = trimmed.trim_matches(|c| c == '[' || c == ']');
            inside = header == name;
            continue;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn documents(section_text: &str, key: &str) -> bool {
    section_text.lines().any(|l| {
        let l = l.trim_start_matches('#').trim_start();
        l.starts_with(&format!("{key} ="))
            || l.contains(&format!(" {key} ="))
            || l.contains(&format!("{{ {key} ="))
            || l.contains(&format!(".{key}]"))
    })
}

#[test]
fn every_configuration_key_is_in_the_reference_file() {
    let mut missing = Vec::new();
    let mut checked = 0;
    let root = keys_of("", "").expect("the root table lists its keys");
    assert!(root.contains(&"listeners".to_owned()), "{root:?}");
    for table in root {
        let (header, prefix) = match table.as_str() {
            "listeners" => ("[[listeners]]".to_owned(), LISTENER),
            other => (format!("[{other}]"), ""),
        };
        let Some(keys) = keys_of(&header, prefix) else { continue };
        let text = section(&table);
        for key in keys {
            // A key whose value is itself a table of keys: each of those is documented too.
            let nested = match table.as_str() {
                "listeners" => keys_of(&format!("[[listeners]]\n{LISTENER}[listeners.{key}]"), ""),
                _ => keys_of(&format!("[{table}.{key}]"), ""),
            };
            match nested {
                Some(inner) => {
                    let inner_text = format!("{}{}", section(&format!("{table}.{key}")), text);
                    for k in inner {
                        checked += 1;
                        if !documents(&inner_text, &k) {
                            missing.push(format!("{table}.{key}.{k}"));
                        }
                    }
                }
                None => {
                    checked += 1;
                    if !documents(&text, &key) {
                        missing.push(format!("{table}.{key}"));
                    }
                }
            }
        }
    }
    assert!(checked > 30, "the probe found only {checked} keys: it no longer reads the schema");
    assert!(missing.is_empty(), "config/mesgd.toml does not document: {missing:?}");
}

#[test]
fn the_reference_file_parses() {
    Config::from_toml(REFERENCE, None).unwrap();
}
