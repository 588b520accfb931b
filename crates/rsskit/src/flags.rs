//! The library names a refused setting by its config field (`batch`,
//! `src_net`); the CLI by its flag. This is the one table between the two,
//! used wherever the CLI turns a library error into its message.

use std::error::Error;

/// The flag that sets config field `field` (the field itself for one no
/// flag sets).
pub fn flag_of(field: &'static str) -> &'static str {
    match field {
        "accept_batch" => "--accept-batch",
        "batch" => "--batch",
        "burst" => "--burst",
        "connections" => "--connections",
        "count" => "--count",
        "flush_bytes" => "--flush-bytes",
        "flush_packets" => "--flush-packets",
        "gso" => "--gso",
        "mode" | "steer" => "--steer",
        "object_size" => "--object-size",
        "pid" => "--pid",
        "rate" => "--rate",
        "rcvbuf" => "--rcvbuf",
        "root" => "--root",
        "size" => "--size",
        "sources" => "--sources",
        "src_net" => "--src-net",
        "streams" => "--streams",
        "target" => "--target",
        "threads" => "--threads",
        "udp_4tuple" => "--udp-4tuple",
        "url" => "--url",
        "window" => "--window",
        "workers" => "--workers",
        other => other,
    }
}

/// One error's own message (not its causes), config fields named by their
/// flags.
pub fn message(e: &(dyn Error + 'static)) -> String {
    rsskit_runtime::config::message_with(e, &flag_of).unwrap_or_else(|| e.to_string())
}

/// `{e:#}` (the error and its causes, `: ` between), config fields named
/// by their flags.
pub fn chain(e: &anyhow::Error) -> String {
    e.chain().map(message).collect::<Vec<_>>().join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsskit_runtime::config::ConfigError;

    #[test]
    fn library_fields_print_as_flags() {
        let e = anyhow::Error::new(ConfigError::range("batch", 0, 1, 1024)).context("starting");
        assert_eq!(chain(&e), "starting: --batch must be 1..=1024, not 0");
        let e = ConfigError::Pair {
            field: "src_net",
            value: "10.0.0.0/8".into(),
            join: " and ",
            other: "target",
            other_value: "[::1]:9".into(),
            why: " are of different address families".into(),
        };
        assert_eq!(
            message(&e),
            "--src-net 10.0.0.0/8 and --target [::1]:9 are of different address families"
        );
    }
}
