//! `mesgd plugin check PATH`: what a plugin author runs first. Loads the library exactly as the
//! broker would, and says what it found: the plugin's name, its own version, the ABI version it
//! implements, and whether this mesgd can use it — optionally also whether it accepts a given
//! `config`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::library::{AbiVersion, LoadError, PluginLibrary};
use crate::provider::{CREATE_TIMEOUT, create_instance};

/// What [`check`] found.
#[derive(Debug)]
#[non_exhaustive]
pub struct CheckReport {
    /// The library, as given.
    pub path: PathBuf,
    /// The plugin's name, version and ABI version, or why the library cannot be used.
    pub library: Result<PluginInfo, LoadError>,
    /// Whether `create` accepted the config, when one was given.
    pub created: Option<Result<(), String>>,
}

/// What a usable plugin says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PluginInfo {
    /// The plugin's name (its providers are called `plugin:<name>`).
    pub name: String,
    /// The plugin's own version text.
    pub version: String,
    /// The ABI version it implements.
    pub abi_version: AbiVersion,
}

impl CheckReport {
    /// Whether the broker can load the plugin (and, when a config was given, create it).
    pub fn is_usable(&self) -> bool {
        self.library.is_ok() && !matches!(self.created, Some(Err(_)))
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "library:  {}", self.path.display())?;
        match &self.library {
            Ok(info) => {
                writeln!(f, "name:     {}", info.name)?;
                writeln!(f, "version:  {}", info.version)?;
                writeln!(f, "ABI:      {} (this mesgd: {})", info.abi_version, AbiVersion::HOST)?;
                match &self.created {
                    None => {}
                    Some(Ok(())) => writeln!(f, "create:   accepted the config")?,
                    Some(Err(message)) => writeln!(f, "create:   refused the config: {message}")?,
                }
                if self.is_usable() { writeln!(f, "usable:   yes") } else { writeln!(f, "usable:   no") }
            }
            Err(error) => writeln!(f, "usable:   no: {error}"),
        }
    }
}

/// Loads the plugin at `path`; with `config_json` (a JSON object), also creates and destroys
/// one instance with it.
///
/// The library stays loaded afterwards, as every plugin library does (see [`crate::library`]).
pub fn check(path: &Path, config_json: Option<&str>) -> CheckReport {
    let library = PluginLibrary::open(path).map(Arc::new);
    let created = match (&library, config_json) {
        (Ok(library), Some(config)) => {
            Some(create_instance(library, config.as_bytes().to_vec(), CREATE_TIMEOUT).map(drop))
        }
        _ => None,
    };
    CheckReport {
        path: path.to_owned(),
        library: library.map(|library| PluginInfo {
            name: library.name().to_owned(),
            version: library.version().to_owned(),
            abi_version: library.abi_version(),
        }),
        created,
    }
}
