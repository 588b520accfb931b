//! Fuzz the `apply --restore` save-file reader (`tune::parse_save`): any
//! text. Must never panic or allocate without bound; what it accepts has
//! a valid value of its kind for every entry, derives only paths under the
//! sysroot's `sys/class/net/IF/queues/` or `proc/` (no `..`, no other
//! directory), and round-trips through the text `apply` writes. Errors
//! carry no raw control characters (they are printed to a terminal).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsskit_host::sysroot::Sysroot;
use rsskit_host::tune;
use std::path::{Component, Path};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    match tune::parse_save(s) {
        Ok(save) => {
            let root = Sysroot::tree(Path::new("/fuzz"));
            for e in &save.settings {
                assert!(tune::valid_value(e.target.kind(), &e.value).is_ok(), "{e:?}");
                if let Some(p) = tune::file_of(&root, &e.target) {
                    assert!(
                        p.starts_with("/fuzz/sys/class/net/") || p.starts_with("/fuzz/proc/"),
                        "{}",
                        p.display()
                    );
                    assert!(p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_))), "{p:?}");
                    if p.starts_with("/fuzz/sys") {
                        // class/net/IF/queues/{rx,tx}-N/FILE: the name is one component.
                        assert_eq!(p.components().count(), 9, "{}", p.display());
                    }
                }
            }
            let text = tune::save_text(&save);
            assert_eq!(tune::parse_save(&text).as_ref(), Ok(&save), "{text}");
        }
        Err(problems) => {
            assert!(!problems.is_empty());
            for p in &problems {
                assert!(!p.chars().any(char::is_control), "{p:?}");
            }
        }
    }
});
