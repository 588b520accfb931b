//! Test helper for `tests/lab_ethtool_nl.rs` (not shipped): reads a NIC
//! through the ethtool netlink family and through the ioctl separately, and
//! writes through the one named, so the lab can cross-check the two.
//!
//!   ethtool_nl_probe read IF
//!   ethtool_nl_probe set IF netlink|ioctl channels N
//!   ethtool_nl_probe set IF netlink|ioctl rings RX TX
//!   ethtool_nl_probe set IF netlink|ioctl coalesce RX_USECS
//!   ethtool_nl_probe set IF netlink|ioctl table Q0,Q1,...
//!   ethtool_nl_probe set IF netlink xfrm BITS
//!
//! Prints one JSON object; exits 2 on bad arguments or a missing interface.

use rsskit_linux::ethtool::params::Coalesce;
use rsskit_linux::ethtool::{Ethtool, Reported};
use rsskit_linux::ethtool_nl::{EthtoolNl, RssWrite};
use serde_json::{json, Value};

fn rep<T: serde::Serialize>(r: Reported<T>) -> Value {
    match r {
        Reported::Supported(t) => json!({ "supported": true, "value": t }),
        Reported::Unsupported { reason } => json!({ "supported": false, "reason": reason }),
    }
}

fn fail(msg: String) -> ! {
    eprintln!("ethtool_nl_probe: {msg}");
    std::process::exit(2)
}

fn die<T>(e: rsskit_linux::ethtool::EthtoolError) -> T {
    fail(e.to_string())
}

fn num(s: Option<&String>) -> u32 {
    s.and_then(|s| s.parse().ok()).unwrap_or_else(|| fail("a number is missing or bad".into()))
}

fn read(iface: &str) -> Value {
    let eth = Ethtool::open(iface).unwrap_or_else(|e| fail(e.to_string()));
    let ioctl = json!({
        "rss": rep(eth.rss().unwrap_or_else(die)),
        "channels": rep(eth.channels().unwrap_or_else(die)),
        "rings": rep(eth.rings().unwrap_or_else(die)),
        "coalesce": rep(eth.coalesce().unwrap_or_else(die)),
    });
    let netlink = match EthtoolNl::open(iface) {
        Err(e) => json!({ "unavailable": e.to_string() }),
        Ok(mut n) => {
            let q = |v: Result<Value, _>| {
                v.unwrap_or_else(
                    |e: rsskit_linux::ethtool_nl::EthtoolNlError| json!({ "unavailable": e.to_string() }),
                )
            };
            let rss = q(n.rss(0).map(|r| {
                rep(match r {
                    Reported::Supported(r) => Reported::Supported(r.to_rss()),
                    Reported::Unsupported { reason } => Reported::Unsupported { reason },
                })
            }));
            json!({
                "rss": rss,
                "channels": q(n.channels().map(rep)),
                "rings": q(n.rings().map(rep)),
                "coalesce": q(n.coalesce().map(rep)),
                "has_rss_set": n.has_rss_set(),
            })
        }
    };
    json!({ "ioctl": ioctl, "netlink": netlink })
}

fn set(iface: &str, via: &str, what: &str, args: &[String]) -> Value {
    let eth = Ethtool::open(iface).unwrap_or_else(|e| fail(e.to_string()));
    let r = match via {
        "ioctl" => match what {
            "channels" => {
                let cur = eth.channels().unwrap_or_else(die);
                let cur = *cur.ok().unwrap_or_else(|| fail("channels unreadable".into()));
                eth.set_channels(rsskit_linux::ethtool::Channels { combined_count: num(args.first()), ..cur })
            }
            "rings" => eth.set_rings(num(args.first()), num(args.get(1))),
            "coalesce" => {
                let cur = *eth
                    .coalesce()
                    .unwrap_or_else(die)
                    .ok()
                    .unwrap_or_else(|| fail("coalesce unreadable".into()));
                eth.set_coalesce(&Coalesce { rx_usecs: num(args.first()), ..cur })
            }
            "table" => {
                let t: Vec<u32> = args
                    .first()
                    .map(|s| s.split(',').map(|x| num(Some(&x.to_string()))).collect())
                    .unwrap_or_default();
                eth.set_rss(Some(&t), None)
            }
            w => fail(format!("cannot set {w} through the ioctl here")),
        }
        .unwrap_or_else(die),
        "netlink" => {
            let mut n = EthtoolNl::open(iface).unwrap_or_else(|e| fail(e.to_string()));
            match what {
                "channels" => {
                    let cur = n
                        .channels()
                        .ok()
                        .and_then(|c| c.ok().copied())
                        .unwrap_or_else(|| fail("channels unreadable".into()));
                    n.set_channels(rsskit_linux::ethtool::Channels {
                        combined_count: num(args.first()),
                        ..cur
                    })
                }
                "rings" => n.set_rings(num(args.first()), num(args.get(1))),
                "coalesce" => {
                    let cur = n
                        .coalesce()
                        .ok()
                        .and_then(|c| c.ok().copied())
                        .unwrap_or_else(|| fail("coalesce unreadable".into()));
                    n.set_coalesce(&Coalesce { rx_usecs: num(args.first()), ..cur })
                }
                "table" => {
                    let t: Vec<u32> = args
                        .first()
                        .map(|s| s.split(',').map(|x| num(Some(&x.to_string()))).collect())
                        .unwrap_or_default();
                    n.set_rss(&RssWrite { indir: Some(t), ..RssWrite::default() })
                }
                "xfrm" => n.set_rss(&RssWrite { input_xfrm: Some(num(args.first())), ..RssWrite::default() }),
                w => fail(format!("cannot set {w} here")),
            }
            .unwrap_or_else(|e| fail(e.to_string()))
        }
        v => fail(format!("via {v}: netlink or ioctl")),
    };
    rep(r)
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let out = match a.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["read", iface] => read(iface),
        ["set", iface, via, what, ..] => set(iface, via, what, &a[4..]),
        _ => fail("usage: read IF | set IF netlink|ioctl WHAT ARGS".into()),
    };
    println!("{out}");
}
