//! Fuzz the ethtool generic netlink reply decoders (`rsskit_linux::ethtool_nl`,
//! behind `rsskit info`'s RSS, channels, rings and coalescing): any bytes,
//! as if the kernel had sent them. Must never panic; a table decodes to at
//! most a quarter of the input's bytes, a key to at most the input, and the
//! extended ack's text is printable.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsskit_linux::ethtool_nl;
use rsskit_linux::genl;

fuzz_target!(|data: &[u8]| {
    if let Some(m) = genl::extack_message(data) {
        assert!(m.chars().all(|c| c.is_ascii_graphic() || c == ' '), "{m:?}");
    }
    let Ok(msgs) = genl::parse_messages(data) else { return };
    if let Ok(rs) = ethtool_nl::decode_rss(&msgs) {
        assert!(rs.len() <= msgs.len());
        for r in &rs {
            assert!(r.indir.len() * 4 <= data.len() && r.hkey.len() <= data.len());
            let _ = r.to_rss();
        }
    }
    for n in [
        ethtool_nl::decode_channels(&msgs).map(|v| v.len()),
        ethtool_nl::decode_rings(&msgs).map(|v| v.len()),
        ethtool_nl::decode_coalesce(&msgs).map(|v| v.len()),
    ]
    .into_iter()
    .flatten()
    {
        assert!(n <= msgs.len());
    }
});
