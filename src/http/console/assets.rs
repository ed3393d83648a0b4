//! The console's files, compiled into the binary (`include_bytes!`): no file is read at run
//! time, nothing is fetched from elsewhere, and `cargo build` needs no front-end tooling. The
//! sources are the plain files beside this one in `assets/`; they are served as they are.

/// One embedded file.
pub(crate) struct Asset {
    /// Its name under `/console/assets/`.
    pub(crate) name: &'static str,
    /// Its `Content-Type`.
    pub(crate) content_type: &'static str,
    pub(crate) bytes: &'static [u8],
}

macro_rules! assets {
    ($($name:literal => $type:expr),* $(,)?) => {
        &[$(Asset { name: $name, content_type: $type, bytes: include_bytes!(concat!("assets/", $name)) }),*]
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file the console serves.
pub(crate) const ASSETS: &[Asset] = assets![
    "index.html" => "text/html; charset=utf-8",
    "console.css" => "text/css; charset=utf-8",
    "api.js" => JS,
    "app.js" => JS,
    "chart.js" => JS,
    "ui.js" => JS,
    "pages/acl.js" => JS,
    "pages/client.js" => JS,
    "pages/clients.js" => JS,
    "pages/dashboard.js" => JS,
    "pages/grants.js" => JS,
    "pages/retained.js" => JS,
    "pages/routing.js" => JS,
    "pages/sessions.js" => JS,
    "pages/user.js" => JS,
    "pages/users.js" => JS,
];

/// The page every console address answers with: the front end picks the view from the path.
pub(crate) fn shell() -> &'static Asset {
    &ASSETS[0]
}

/// The file called `name`, if the console has one.
pub(crate) fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most the console's files may weigh together (the budget of docs/console.md).
    const BUDGET_BYTES: usize = 300 * 1024;

    #[test]
    fn every_asset_together_stays_within_the_budget() {
        let total: usize = ASSETS.iter().map(|a| a.bytes.len()).sum();
        assert!(total <= BUDGET_BYTES, "the console's assets weigh {total} bytes, over {BUDGET_BYTES}");
        assert!(total > 10_000, "the asset table looks empty: {total} bytes");
    }

    #[test]
    fn every_file_in_the_assets_directory_is_served_and_typed() {
        fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).expect("the assets directory") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    walk(&path, base, out);
                } else {
                    out.push(path.strip_prefix(base).unwrap().to_string_lossy().replace('\\', "/"));
                }
            }
        }
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http/console/assets");
        let mut on_disk = Vec::new();
        walk(&base, &base, &mut on_disk);
        on_disk.sort();
        let mut served: Vec<String> = ASSETS.iter().map(|a| a.name.to_owned()).collect();
        served.sort();
        assert_eq!(on_disk, served, "a file in assets/ is not in ASSETS, or the other way round");
        for a in ASSETS {
            let ext = a.name.rsplit('.').next().unwrap();
            let expected = match ext {
                "html" => "text/html",
                "css" => "text/css",
                "js" => "text/javascript",
                other => panic!("{}: no content type for .{other}", a.name),
            };
            assert!(a.content_type.starts_with(expected), "{}: {}", a.name, a.content_type);
        }
        assert_eq!(shell().name, "index.html");
    }
}
