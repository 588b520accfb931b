//! Fuzz the capture reader (pcap and pcapng, through `pcap-file`): any
//! bytes as a capture file. Must never panic or allocate without bound; it
//! opens or refuses, then yields frames that come from the file: each at
//! most its record's bytes plus the synthetic Ethernet header of raw IP,
//! and never more frames than records the file has room for.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsskit_dataplane::io::pcap::PcapSource;
use rsskit_dataplane::io::{Recv, Source};
use std::path::PathBuf;
use std::sync::OnceLock;

/// One scratch file per process, on tmpfs where there is one.
fn scratch() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir =
            if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() };
        dir.join(format!("rsskit-fuzz-pcap-{}.pcap", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    std::fs::write(path, data).unwrap();
    let Ok(mut src) = PcapSource::open(path, 1, false) else { return };
    // Every record has a header of at least 12 (pcapng simple packet) or
    // 16 (pcap) bytes after a file header of at least 24 bytes.
    let max_frames = data.len() / 12 + 1;
    let mut frames = 0usize;
    let mut bytes = 0usize;
    loop {
        match src.recv() {
            Recv::Frame { data: f, .. } => {
                frames += 1;
                bytes += f.len();
                assert!(f.len() <= data.len() + 14, "a frame larger than the file");
                assert!(frames <= max_frames, "more frames than the file has room for");
            }
            Recv::Done => break,
            Recv::Idle => unreachable!("no timing asked"),
        }
    }
    assert!(bytes <= data.len() + 14 * frames);
});
