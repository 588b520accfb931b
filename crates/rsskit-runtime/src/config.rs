//! Refused configuration values, named by their config field.
//!
//! A [`ConfigError`] names the field as the embedder's config struct spells
//! it (`batch`, `src_net`) and the value refused; its `Display` says so. A
//! front end that calls the fields otherwise (the CLI: by its flags) renders
//! the same message with its own names through [`ConfigError::render`], or
//! [`message_with`] for any error of this crate.

use std::error::Error;
use std::fmt;

/// How a front end names a config field (the CLI: its flag).
pub type Namer<'a> = &'a dyn Fn(&'static str) -> &'static str;

/// A configuration value refused before anything ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// `field` is `value`, outside `min..=max`.
    Range {
        /// The config field.
        field: &'static str,
        /// The value refused.
        value: u64,
        /// The least value allowed.
        min: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// `field` is `value`; it must be `need` (`at least 1`).
    Must {
        /// The config field.
        field: &'static str,
        /// The value refused.
        value: String,
        /// What it must be.
        need: &'static str,
    },
    /// `field`'s `value` refused, `why` said after it
    /// (`: port 0 cannot be a destination`, ` is above ...`).
    Value {
        /// The config field.
        field: &'static str,
        /// The value refused, as shown.
        value: String,
        /// Why, after the value.
        why: String,
    },
    /// Two fields whose values do not go together:
    /// `field value{join}other other_value{why}`.
    Pair {
        /// The first field.
        field: &'static str,
        /// Its value.
        value: String,
        /// Between the two (` and `, ` with `).
        join: &'static str,
        /// The second field.
        other: &'static str,
        /// Its value.
        other_value: String,
        /// Why, after both.
        why: String,
    },
    /// A field and its value inside a sentence:
    /// `{before}{field}{join}{value}{after}`.
    Said {
        /// What comes first.
        before: String,
        /// The config field.
        field: &'static str,
        /// Between the field and its value (` `, ` says `).
        join: &'static str,
        /// The value.
        value: String,
        /// What comes last.
        after: String,
    },
}

impl ConfigError {
    /// `field` is `value`; it must be at least 1.
    pub fn at_least_one(field: &'static str, value: impl fmt::Display) -> ConfigError {
        ConfigError::Must { field, value: value.to_string(), need: "at least 1" }
    }

    /// `field` is `value`, outside `min..=max`.
    pub fn range(field: &'static str, value: u64, min: u64, max: u64) -> ConfigError {
        ConfigError::Range { field, value, min, max }
    }

    /// `field`'s `value` refused, `why` said after it.
    pub fn value(field: &'static str, value: impl fmt::Display, why: impl Into<String>) -> ConfigError {
        ConfigError::Value { field, value: value.to_string(), why: why.into() }
    }

    /// The (first) field named.
    pub fn field(&self) -> &'static str {
        match self {
            ConfigError::Range { field, .. }
            | ConfigError::Must { field, .. }
            | ConfigError::Value { field, .. }
            | ConfigError::Pair { field, .. }
            | ConfigError::Said { field, .. } => field,
        }
    }

    /// The message with each field called `name(field)`; `Display` is
    /// this with the fields' own names.
    pub fn render(&self, name: Namer) -> String {
        match self {
            ConfigError::Range { field, value, min, max } => {
                format!("{} must be {min}..={max}, not {value}", name(field))
            }
            ConfigError::Must { field, need, .. } => format!("{} must be {need}", name(field)),
            ConfigError::Value { field, value, why } => format!("{} {value}{why}", name(field)),
            ConfigError::Pair { field, value, join, other, other_value, why } => {
                format!("{} {value}{join}{} {other_value}{why}", name(field), name(other))
            }
            ConfigError::Said { before, field, join, value, after } => {
                format!("{before}{}{join}{value}{after}", name(field))
            }
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&|field| field))
    }
}

impl Error for ConfigError {}

/// The message of `e` alone (not its causes) with each config field called
/// `name(field)`, where `e` is a refused config value of this crate (a
/// [`ConfigError`], or an error of this crate that holds one); `None`
/// otherwise (its `Display` names no field).
pub fn message_with(e: &(dyn Error + 'static), name: Namer) -> Option<String> {
    use crate::http::load::LoadError;
    use crate::http::server::ServeError;
    use crate::takeover::TakeoverError;
    use crate::udp_echo::EchoError;
    use crate::udp_load::UdpLoadError;
    if let Some(c) = e.downcast_ref::<ConfigError>() {
        return Some(c.render(name));
    }
    if let Some(EchoError::Config(c)) = e.downcast_ref() {
        return Some(c.render(name));
    }
    if let Some(e) = e.downcast_ref::<UdpLoadError>() {
        return e.message_with(name);
    }
    if let Some(c) = e.downcast_ref::<ServeError>().and_then(ServeError::config) {
        return Some(c.render(name));
    }
    if let Some(c) = e.downcast_ref::<LoadError>().and_then(LoadError::config) {
        return Some(c.render(name));
    }
    e.downcast_ref::<TakeoverError>()?.message_with(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::load::{self, parse_url};
    use crate::http::server::ServeConfig;
    use crate::takeover::TakeoverError;
    use crate::udp_echo::{EchoConfig, EchoServer};
    use crate::udp_load::{self, ServerTable};
    use rsskit_core::{CpuId, HashConfig, RssKey, RssPolicy};
    use std::sync::Arc;

    fn policy() -> Arc<RssPolicy> {
        Arc::new(RssPolicy::new(RssKey::microsoft(), HashConfig::default(), &[CpuId(0)], None).unwrap())
    }

    /// Every refusal of the config validations: its message names config
    /// fields, never a CLI flag (`--batch`), and reads the same through
    /// [`message_with`] with the fields' own names.
    #[test]
    fn config_errors_name_fields_not_flags() {
        let mut msgs: Vec<(String, Option<String>)> = Vec::new();
        let mut note = |e: &(dyn Error + 'static)| msgs.push((e.to_string(), message_with(e, &|f| f)));

        let echo = |f: fn(&mut EchoConfig)| {
            let mut c = EchoConfig::new("127.0.0.1:0".parse().unwrap(), policy());
            f(&mut c);
            EchoServer::start(c).err().expect("refused")
        };
        for e in [
            echo(|c| c.batch = 0),
            echo(|c| c.batch = 100_000),
            echo(|c| c.flush_packets = 0),
            echo(|c| c.flush_bytes = 0),
            echo(|c| c.rcvbuf = Some(usize::MAX)),
        ] {
            note(&e);
        }

        let udp = |f: fn(&mut udp_load::LoadConfig)| {
            let table = ServerTable::from_policy(RssPolicy::clone(&policy()));
            let mut c = udp_load::LoadConfig::new("127.0.0.1:9".parse().unwrap(), table);
            f(&mut c);
            c.validate().expect_err("refused")
        };
        for e in [
            udp(|c| c.streams = 0),
            udp(|c| c.size = 1),
            udp(|c| c.target = "127.0.0.1:0".parse().unwrap()),
            udp(|c| c.target = "0.0.0.0:9".parse().unwrap()),
            udp(|c| c.threads = 0),
            udp(|c| c.rate = Some(0)),
            udp(|c| c.count = Some(0)),
            udp(|c| c.burst = 0),
            udp(|c| c.gso = 0),
            udp(|c| (c.gso, c.size) = (16, 5000)),
            udp(|c| c.window = Some(0)),
            udp(|c| c.src_net = Some("fd00::/64".parse().unwrap())),
        ] {
            note(&e);
        }

        let http = |f: fn(&mut load::LoadConfig)| {
            let mut c = load::LoadConfig {
                url: parse_url("http://127.0.0.1:8080/").unwrap(),
                connections: 4,
                duration: std::time::Duration::from_secs(1),
                rate: None,
                close: false,
                policy: policy(),
                pin: false,
                sources: None,
                timeout: std::time::Duration::from_secs(5),
                src_ports: load::SrcPorts::Kernel,
                server_policy: policy(),
                sched_batch: false,
            };
            f(&mut c);
            c.validate().expect_err("refused")
        };
        for e in [
            http(|c| c.connections = 0),
            http(|c| c.rate = Some(f64::NAN)),
            http(|c| c.sources = Some("::1/128".parse().unwrap())),
            parse_url("ftp://x/").unwrap_err(),
        ] {
            note(&e);
        }

        let serve = |f: fn(&mut ServeConfig)| {
            let mut c = ServeConfig::new("127.0.0.1:0".parse().unwrap(), policy());
            f(&mut c);
            c.validate().expect_err("refused")
        };
        for e in [serve(|c| c.accept_batch = 0), serve(|c| c.object_size = usize::MAX)] {
            note(&e);
        }
        note(&TakeoverError::Itself(1));
        for net in [None, Some("10.9.0.0/16".parse().unwrap())] {
            note(&udp_load::UdpLoadError::NoSourceAddress { bucket: 1, net, ipv6: false });
        }

        assert_eq!(msgs.len(), 26);
        for (text, rendered) in &msgs {
            assert!(!text.contains("--"), "names a flag: {text}");
            assert_eq!(rendered.as_deref(), Some(text.as_str()), "not a config error: {text}");
        }
        // The field and the value, as the embedder set them.
        assert!(msgs.iter().any(|m| m.0 == "batch must be 1..=1024, not 0"), "{msgs:?}");
        assert!(msgs
            .iter()
            .any(|m| m.0 == "src_net fd00::/64 and target 127.0.0.1:9 are of different address families"));
    }

    #[test]
    fn a_front_end_names_the_fields_its_way() {
        let e = ConfigError::range("batch", 0, 1, 1024);
        assert_eq!(
            e.render(&|f| if f == "batch" { "--batch" } else { f }),
            "--batch must be 1..=1024, not 0"
        );
        assert_eq!(e.field(), "batch");
    }
}
