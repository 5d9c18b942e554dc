//! Headless Chromium for the tests of what a browser shows (Debian's `chromium`, installed by
//! `tests/peers/setup.sh`; missing, the test fails loudly).

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn chromium() -> PathBuf {
    for path in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(path).exists() {
            return PathBuf::from(path);
        }
    }
    panic!("Chromium is not installed: run `bash tests/peers/setup.sh --only chromium` (apt-get install chromium)");
}

/// What Chromium printed on stderr that came from the page (console messages, script
/// errors), and the DOM after the page's scripts ran.
pub struct Loaded {
    /// The DOM after the scripts ran.
    pub dom: String,
    /// Console messages and script errors.
    pub console: Vec<String>,
}

pub fn run_chromium(url: &str, profile: &Path, extra: &[String]) -> (String, String) {
    let out = Command::new(chromium())
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=30000",
            "--window-size=1400,1800",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn load(url: &str, profile: &Path) -> Loaded {
    let (dom, stderr) = run_chromium(url, profile, &["--dump-dom".to_string()]);
    let console = stderr
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("Content Security Policy"))
        .map(str::to_string)
        .collect();
    Loaded { dom, console }
}

pub fn screenshot(url: &str, profile: &Path, file: &Path) {
    let _ = std::fs::remove_file(file);
    let (_, stderr) = run_chromium(url, profile, &[format!("--screenshot={}", file.display())]);
    let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 20_000,
        "no screenshot at {} ({size} bytes): {stderr}",
        file.display()
    );
}

/// The text of the element with `id` in a dumped DOM (its first text run).
pub fn text_of(dom: &str, id: &str) -> String {
    let Some(at) = dom.find(&format!("id=\"{id}\"")) else {
        return String::new();
    };
    let rest = &dom[at..];
    let Some(open) = rest.find('>') else {
        return String::new();
    };
    let rest = &rest[open + 1..];
    rest[..rest.find('<').unwrap_or(rest.len())].trim().to_string()
}

/// [`load`] on the blocking pool (Chromium runs for seconds; the gateway keeps serving).
pub async fn load_async(url: String, profile: &Path) -> Loaded {
    let profile = profile.to_path_buf();
    tokio::task::spawn_blocking(move || load(&url, &profile))
        .await
        .expect("chromium")
}
