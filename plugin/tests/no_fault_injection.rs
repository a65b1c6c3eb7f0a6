//! The plugin built as packaged (no `fault-injection` feature) carries no fault injection: the
//! cdylib cargo built beside this test has neither the feature's mark (the exported
//! `jobscope_fault_injection` symbol) nor the text of its deliberate panics. Built with
//! `--features fault-injection` (the cluster tests' `jobscope_spank_faults.so`), it has both: the
//! check looks for bytes that only the feature's code puts there, so it can fail either way.

use std::path::PathBuf;

/// `target/<profile>/libjobscope_spank.so`: cargo builds the cdylib with the features of this
/// test run and puts it two levels above the test binary (`target/<profile>/deps/`).
fn built_plugin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary in target/<profile>/deps");
    profile_dir.join("libjobscope_spank.so")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn the_built_plugin_has_fault_injection_only_with_the_feature() {
    let so = built_plugin();
    let bytes = std::fs::read(&so).unwrap_or_else(|e| panic!("{}: {e}", so.display()));
    let with_feature = cfg!(feature = "fault-injection");
    for needle in [
        &b"jobscope_fault_injection"[..],
        b"jobscope fault injection: init panic",
        b"jobscope fault injection: exit panic",
        // the sampler's, compiled in through jobscope-sampler/fault-injection
        b"jobscope fault injection: sampler panic after ",
    ] {
        assert_eq!(
            contains(&bytes, needle),
            with_feature,
            "{}: {:?} present: {}, built with fault-injection: {with_feature}",
            so.display(),
            String::from_utf8_lossy(needle),
            !with_feature
        );
    }
}
