# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_rsskit_global_optspecs
    string join \n allow-weak-key h/help V/version
end

function __fish_rsskit_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_rsskit_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_rsskit_using_subcommand
    set -l cmd (__fish_rsskit_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c rsskit -n "__fish_rsskit_needs_command" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_needs_command" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_needs_command" -s V -l version -d 'Print version'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "hash" -d 'Toeplitz hash of a flow: hash, bucket and CPU'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "table" -d 'DragonFly ringmap: ring -> CPU binding and the NIC redirect table'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "find" -d 'Find source ports or addresses whose flows land in a chosen bucket or CPU'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "info" -d 'The host\'s RSS setup: CPUs, NUMA, per-interface queues, keys, tables, IRQs, RPS'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "capture" -d 'Copy the host facts rsskit reads into DIR, for `plan`, `check` and `info --from DIR` offline'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "plan" -d 'Tuning plan per device: CPUs, queue -> CPU (ringmap), table, key, IRQ affinity, XPS, RPS, steering'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "apply" -d 'Apply a plan (diff, --dry-run, save, read back) or --restore a saved state'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "check" -d 'Does this host keep every flow on one CPU? Verdict and reasons per device (exit 1 if not)'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "persist" -d 'Persisted plans (from `apply --persist`): list, apply one device\'s, remove'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "agent" -d 'Keep every persisted plan applied: watches link events, re-checks, puts back what drifted; Prometheus metrics'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "udp-echo" -d 'Per-CPU UDP echo/sink server: pinned workers, steered reuseport sockets, per-worker counters'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "udp-load" -d 'UDP load generator: N streams spread over the server\'s buckets, RTT, per-stream steering check'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "demo" -d 'Loopback demo: echo server (one pinned worker per CPU, toeplitz steering) + spread load'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "http-serve" -d 'CPU-local HTTP/1.1 server: pinned worker per CPU, steered reuseport listeners, accept cap'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "http-load" -d 'HTTP/1.1 load tester: pinned workers, tens of thousands of connections, latency histogram'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "firewall" -d 'Per-CPU stateful firewall (ipfw-style rules, per-worker state tables, redirect) on pcap or AF_PACKET'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "pipeline" -d 'User-space data plane: NIC-style hash, netisr dispatch to per-CPU workers, reassembly, re-injection'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "steer" -d 'Steer a running server\'s SO_REUSEPORT group (nginx, ...) to its CPU-pinned workers'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "run" -d 'Start a server and steer its SO_REUSEPORT group once its workers are up'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "top" -d 'Live per-CPU NET_RX softirqs and packets/s, queue IRQs/s, imbalance (like top, for the network)'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "xdp-steer" -d 'Software RSS in XDP: Toeplitz-hash each frame and redirect it to its bucket\'s CPU (cpumap)'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "bench" -d 'Micro-benchmarks'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "completions" -d 'Print the shell completion script (bash, zsh, fish, ...) to stdout'
complete -c rsskit -n "__fish_rsskit_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rsskit -n "__fish_rsskit_using_subcommand hash" -l src -d 'Source: ADDR or ADDR:PORT ([IPV6]:PORT)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand hash" -l dst -d 'Destination: ADDR or ADDR:PORT ([IPV6]:PORT)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand hash" -l proto -d 'Transport protocol; required with ports' -r -f -a "tcp\t''
udp\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand hash" -l key -d 'RSS key: default (Microsoft), symmetric, random (checked), or 40+ bytes of hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand hash" -l bits -d 'Bucket bits (1-7); default FreeBSD\'s fls(ncpus-1)+1' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand hash" -l cpus -d 'CPUs the buckets are spread over, 1-8192 (default: online CPUs)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand hash" -l iface -d 'Where the flow lands on this host: interface IF\'s key, hashed fields, indirection table, the queue\'s IRQ CPU and RPS CPUs' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand hash" -l flows -d 'With --iface: many flows, one per line of FILE (`-`: stdin) as `SRC DST [tcp|udp]`; one answer per line (with --json, one JSON object per line)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand hash" -l json -d 'Print one JSON object'
complete -c rsskit -n "__fish_rsskit_using_subcommand hash" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand hash" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand table" -l cpus -d 'CPUs the host spreads flows over (1-8192)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand table" -l rings -d 'RX rings of the NIC, 1-8192 (capped at the CPU count)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand table" -l unit -d 'Device unit: NIC number (0-65535); each unit starts on its own CPU set' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand table" -l tx-rings -d 'Separate TX ring count (1-8192), spread to match the RX rings (if_ringmap_match)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand table" -l size -d 'Redirect table entries: a multiple of 128, at most 65536' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand table" -l pow2 -d 'The NIC needs a power-of-two ring count (if_ringmap_alloc2)'
complete -c rsskit -n "__fish_rsskit_using_subcommand table" -l json -d 'Print one JSON object'
complete -c rsskit -n "__fish_rsskit_using_subcommand table" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand table" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l dst -d 'Destination ADDR:PORT ([IPV6]:PORT)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l src-ports -d 'Source port range A-B (or one port); the source address is --src' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l src-net -d 'Source network ADDR/LEN; the source port is --src-port' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l bucket -d 'Wanted bucket (hash & (buckets - 1)): 0-127' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l cpu -d 'Wanted CPU (0-8191): any bucket that CPU owns' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l ring -d 'Wanted NIC ring (0-8191): any redirect table entry of that ring (needs --rings)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l rings -d 'RX rings of the NIC (1-8192), for --ring (DragonFly ringmap, 128-entry table)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l count -d 'How many tuples to print, 1-1000000 (the lowest ports or addresses)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l proto -d 'Transport protocol: hash its 4-tuple' -r -f -a "tcp\t''
udp\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l key -d 'RSS key: default (Microsoft), symmetric, random (checked), or 40+ bytes of hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l bits -d 'Bucket bits (1-7); default FreeBSD\'s fls(ncpus-1)+1' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l cpus -d 'CPUs the buckets are spread over, 1-8192 (default: online CPUs)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l src -d 'Fixed source address with --src-ports (default 127.0.0.1, or ::1 for an IPv6 --dst)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l src-port -d 'Fixed source port (0-65535) with --src-net (needed with --proto)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l json -d 'Print one JSON object'
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand find" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand info" -l iface -d 'Only this interface (default: all of them)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand info" -l from -d 'Show the host captured in DIR (`rsskit capture DIR`) instead of this one' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand info" -l json -d 'Print one JSON object'
complete -c rsskit -n "__fish_rsskit_using_subcommand info" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand info" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand capture" -l json -d 'Print the manifest as JSON'
complete -c rsskit -n "__fish_rsskit_using_subcommand capture" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand capture" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l iface -d 'Interface to plan (repeat for several); default: every interface on a device (not lo or virtual ones)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l cpus -d 'CPUs to use (e.g. 0-7,16-23); default: the device\'s NUMA node (topped up if it has fewer CPUs than queues)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l app-cpus -d 'CPUs for the application (e.g. 8-15): no IRQ or RPS there; the plan\'s steering runs udp-echo, http-serve and steer workers on them (toeplitz with the NIC\'s key)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l unit -d 'Device unit of the first NIC: each NIC starts its queues on its own CPU set (0-8191)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l key -d 'RSS key: keep (the NIC\'s), random (checked), symmetric, microsoft, or hex of the device\'s key length' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l rps-flow-cnt -d 'RFS: flow table entries per RX queue (rps_flow_cnt), 0-1073741824' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l rps-sock-flow-entries -d 'RFS: global socket flow table entries (net.core.rps_sock_flow_entries), 0-1073741824' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l hash-fields -d 'Hashed fields for a flow type, set with ETHTOOL_SRXFH: FLOW=4-tuple|2-tuple (FLOW: tcp4 udp4 sctp4 tcp6 udp6 sctp6; ip4 ip6 take 2-tuple); repeat for several' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l software-rss -d 'Software RSS for devices without hardware RSS: rps (the kernel\'s hash) or xdp (rsskit\'s Toeplitz in XDP, run by `rsskit xdp-steer`; RPS off)' -r -f -a "rps\t''
xdp\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l rebalance -d 'Bucket rebalancing: measure each RX queue\'s load for S seconds (default 5) and move table entries from the busiest queues to the least busy (the current table, not the ringmap\'s); reports the imbalance before and after' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l from -d 'Plan the host captured in DIR (`rsskit capture DIR`) instead of this one, offline and read-only' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l isolate -d 'Give a service its own queues and CPUs: MATCH=CPUS (udp:443=8-15, tcp4:8080=2,3, or ethtool -N match words: \'ip4 dst-ip 10.0.0.0/24=4-7\'). The queues whose IRQs go to those CPUs get a new RSS context, a flow rule steers the matches into it, and the main table leaves them out; repeat for several' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l sysroot -d 'Read and write a tree shaped like /sys and /proc under DIR instead (tests)' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l napi-defer-hard-irqs -d 'NAPI: napi_defer_hard_irqs for each planned device (IRQs kept masked over N empty polls; 0-2147483647)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l gro-flush-timeout -d 'NAPI: gro_flush_timeout for each planned device, in nanoseconds (0-3600000000000)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l rx-ring -d 'Descriptors per RX ring (ethtool -G rx), 1 to the device\'s maximum; default: kept' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l tx-ring -d 'Descriptors per TX ring (ethtool -G tx), 1 to the device\'s maximum; default: kept' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l coalesce -d 'Interrupt coalescing: adaptive (RX and TX moderation by load) or fixed:USECS[,FRAMES] (adaptive RX off, an RX interrupt USECS after a frame or at FRAMES frames); default: kept' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l channels -d 'Combined channels: keep (default: changing the count resets every queue and IRQ of a live NIC, dropping traffic for a moment), auto (one queue per planned CPU up to the device\'s maximum) or a count. The plan prints the decision and why' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l symmetric -d 'Symmetric hashing (a flow and its reverse on one queue): auto (the NIC\'s input_xfrm where the driver takes one, else the symmetric key), xfrm (ask the driver for the transform) or key (the symmetric key); the plan says which and why. --key only with xfrm' -r -f -a "auto\t''
xfrm\t''
key\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l json -d 'Print the plan as JSON (the input of `rsskit apply`)'
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand plan" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l iface -d 'Interface to plan (repeat for several); default: every interface on a device (not lo or virtual ones)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l cpus -d 'CPUs to use (e.g. 0-7,16-23); default: the device\'s NUMA node (topped up if it has fewer CPUs than queues)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l app-cpus -d 'CPUs for the application (e.g. 8-15): no IRQ or RPS there; the plan\'s steering runs udp-echo, http-serve and steer workers on them (toeplitz with the NIC\'s key)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l unit -d 'Device unit of the first NIC: each NIC starts its queues on its own CPU set (0-8191)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l key -d 'RSS key: keep (the NIC\'s), random (checked), symmetric, microsoft, or hex of the device\'s key length' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l rps-flow-cnt -d 'RFS: flow table entries per RX queue (rps_flow_cnt), 0-1073741824' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l rps-sock-flow-entries -d 'RFS: global socket flow table entries (net.core.rps_sock_flow_entries), 0-1073741824' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l hash-fields -d 'Hashed fields for a flow type, set with ETHTOOL_SRXFH: FLOW=4-tuple|2-tuple (FLOW: tcp4 udp4 sctp4 tcp6 udp6 sctp6; ip4 ip6 take 2-tuple); repeat for several' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l software-rss -d 'Software RSS for devices without hardware RSS: rps (the kernel\'s hash) or xdp (rsskit\'s Toeplitz in XDP, run by `rsskit xdp-steer`; RPS off)' -r -f -a "rps\t''
xdp\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l rebalance -d 'Bucket rebalancing: measure each RX queue\'s load for S seconds (default 5) and move table entries from the busiest queues to the least busy (the current table, not the ringmap\'s); reports the imbalance before and after' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l from -d 'Plan the host captured in DIR (`rsskit capture DIR`) instead of this one, offline and read-only' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l isolate -d 'Give a service its own queues and CPUs: MATCH=CPUS (udp:443=8-15, tcp4:8080=2,3, or ethtool -N match words: \'ip4 dst-ip 10.0.0.0/24=4-7\'). The queues whose IRQs go to those CPUs get a new RSS context, a flow rule steers the matches into it, and the main table leaves them out; repeat for several' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l sysroot -d 'Read and write a tree shaped like /sys and /proc under DIR instead (tests)' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l napi-defer-hard-irqs -d 'NAPI: napi_defer_hard_irqs for each planned device (IRQs kept masked over N empty polls; 0-2147483647)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l gro-flush-timeout -d 'NAPI: gro_flush_timeout for each planned device, in nanoseconds (0-3600000000000)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l rx-ring -d 'Descriptors per RX ring (ethtool -G rx), 1 to the device\'s maximum; default: kept' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l tx-ring -d 'Descriptors per TX ring (ethtool -G tx), 1 to the device\'s maximum; default: kept' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l coalesce -d 'Interrupt coalescing: adaptive (RX and TX moderation by load) or fixed:USECS[,FRAMES] (adaptive RX off, an RX interrupt USECS after a frame or at FRAMES frames); default: kept' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l channels -d 'Combined channels: keep (default: changing the count resets every queue and IRQ of a live NIC, dropping traffic for a moment), auto (one queue per planned CPU up to the device\'s maximum) or a count. The plan prints the decision and why' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l symmetric -d 'Symmetric hashing (a flow and its reverse on one queue): auto (the NIC\'s input_xfrm where the driver takes one, else the symmetric key), xfrm (ask the driver for the transform) or key (the symmetric key); the plan says which and why. --key only with xfrm' -r -f -a "auto\t''
xfrm\t''
key\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l save -d 'Save the values replaced to FILE, a new file (default: /var/lib/rsskit/rsskit-saved-<time>.json)' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l restore -d 'Put back the values saved in FILE by an earlier apply' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l root -d 'Prefix every rsskit file (/etc/rsskit, /run/rsskit.lock, the udev rule, the units, irqbalance\'s options) with DIR' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l lock-wait -d 'Seconds to wait for another rsskit writer (apply, persist, agent) before refusing' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l dry-run -d 'Show the changes and stop'
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l persist -d 'Also keep the plan: store it under /etc/rsskit and apply it whenever the device appears (see `rsskit persist --help`)'
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand apply" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand check" -l iface -d 'Interface to check (repeat for several); default: every interface on a device' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand check" -l probe -d 'Also probe a running `rsskit udp-echo` at ADDR:PORT end to end' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand check" -l probe-flows -d 'Flows the probe sends (each from its own source port), 1-1024' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand check" -l from -d 'Check the host captured in DIR (`rsskit capture DIR`) instead of this one, offline' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand check" -l sysroot -d 'Read a tree shaped like /sys and /proc under DIR instead (tests)' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand check" -l seconds -d 'With --live: how long to watch, above 0 and below 10^7 (default 5)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand check" -l packets -d 'With --live: stop after this many frames, 1-1000000000000' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand check" -l json -d 'Print one JSON object'
complete -c rsskit -n "__fish_rsskit_using_subcommand check" -l live -d 'Verify the NIC against its own received traffic (see below)'
complete -c rsskit -n "__fish_rsskit_using_subcommand check" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand check" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and not __fish_seen_subcommand_from list apply remove help" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and not __fish_seen_subcommand_from list apply remove help" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and not __fish_seen_subcommand_from list apply remove help" -f -a "list" -d 'The persisted plans, and which interface each matches now'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and not __fish_seen_subcommand_from list apply remove help" -f -a "apply" -d 'Apply the persisted plan of IF now (run by rsskit-apply@IF.service)'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and not __fish_seen_subcommand_from list apply remove help" -f -a "remove" -d 'Remove IF\'s plan; without IF every plan, the rule, the unit and rsskit\'s irqbalance bans'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and not __fish_seen_subcommand_from list apply remove help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from list" -l root -d 'Prefix every rsskit file (/etc/rsskit, /run/rsskit.lock, the udev rule, the units, irqbalance\'s options) with DIR' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from list" -l lock-wait -d 'Seconds to wait for another rsskit writer (apply, persist, agent) before refusing' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from list" -l sysroot -d 'Read a tree shaped like /sys and /proc under DIR instead (tests)' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from list" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from apply" -l root -d 'Prefix every rsskit file (/etc/rsskit, /run/rsskit.lock, the udev rule, the units, irqbalance\'s options) with DIR' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from apply" -l lock-wait -d 'Seconds to wait for another rsskit writer (apply, persist, agent) before refusing' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from apply" -l sysroot -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from apply" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from apply" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from remove" -l root -d 'Prefix every rsskit file (/etc/rsskit, /run/rsskit.lock, the udev rule, the units, irqbalance\'s options) with DIR' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from remove" -l lock-wait -d 'Seconds to wait for another rsskit writer (apply, persist, agent) before refusing' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from remove" -l sysroot -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from remove" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from remove" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from help" -f -a "list" -d 'The persisted plans, and which interface each matches now'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from help" -f -a "apply" -d 'Apply the persisted plan of IF now (run by rsskit-apply@IF.service)'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from help" -f -a "remove" -d 'Remove IF\'s plan; without IF every plan, the rule, the unit and rsskit\'s irqbalance bans'
complete -c rsskit -n "__fish_rsskit_using_subcommand persist; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rsskit -n "__fish_rsskit_using_subcommand agent" -l root -d 'Prefix every rsskit file (/etc/rsskit, /run/rsskit.lock, the udev rule, the units, irqbalance\'s options) with DIR' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand agent" -l lock-wait -d 'Seconds to wait for another rsskit writer (apply, persist, agent) before refusing' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand agent" -l interval -d 'Re-check every S seconds (besides link events), 1-86400' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand agent" -l metrics -d 'Serve Prometheus metrics at http://ADDR:PORT/metrics' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand agent" -l sysroot -d 'Read a tree shaped like /sys and /proc under DIR instead (tests; no link events there)' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand agent" -l once -d 'Check and correct once, then exit (0: every persisted device checked and aligned, 1: not)'
complete -c rsskit -n "__fish_rsskit_using_subcommand agent" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand agent" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l bind -d 'Address and port to serve: ADDR:PORT or [IPV6]:PORT (port 0: any free port)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l cpus -d 'CPUs to run one worker each on, e.g. 0-3,6 (ids 0-8191; default: every online CPU)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l steer -d 'How datagrams reach the workers: cpu, toeplitz, ebpf, kernel or shared' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l batch -d 'Datagrams per recvmmsg call (1-1024)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l flush-packets -d 'Flush queued replies once this many are pending (1-1024); they are flushed anyway when the receive queue drains' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l flush-bytes -d 'Flush queued replies once this many bytes are pending (1-16777216)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l key -d 'RSS key: default (Microsoft), symmetric, random, nic:IF (the NIC\'s key, and its UDP hashed fields), or 40+ bytes of hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l bits -d 'Bucket bits of the server\'s table (1-7); default FreeBSD\'s fls(workers-1)+1' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l rcvbuf -d 'SO_RCVBUF per socket, bytes (0: the kernel default, net.core.rmem_default); the kernel caps it at net.core.rmem_max. The size granted is printed at start and in the summary. At most 1073741823' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l duration -d 'Stop after this many seconds, above 0 and below 10^7 (default: run until SIGINT/SIGTERM)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l table -d 'Buckets follow a NIC\'s table: nic:IF (IF\'s indirection table, each entry owned by the worker on its queue\'s IRQ CPU); use with --key nic:IF' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l rebalance-every -d 'Seconds between rebalancing rounds, above 0 and below 10^7' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l sched -d 'Scheduling policy of the workers: batch (SCHED_BATCH: a datagram\'s wake-up waits until the task running on the worker\'s CPU blocks or ends its slice, so one wake-up finds more queued; less CPU per datagram, up to a slice of added latency on a CPU shared with a busy task) or normal (SCHED_OTHER: woken at once). Printed at start' -r -f -a "batch\t''
normal\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l plot -d 'Write datagrams/s received per worker over time as an SVG chart at the end' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l sink -d 'Count only, never reply'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l udp-4tuple -d 'Hash UDP on addresses and ports (then streams are spread by source port); default: addresses only, as FreeBSD (spread by source address)'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l json -d 'Print one JSON summary on stdout at exit (per-second lines go to stderr)'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l rebalance -d 'Move buckets live from the busiest worker to the least busy one (each worker\'s datagrams over --rebalance-every); needs --steer ebpf. Every move is printed (and listed under "rebalance" in --json)'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l no-offload -d 'No UDP offload: by default, where the kernel has UDP_GRO and UDP_SEGMENT, a worker receives the datagrams of one flow that arrive together as one coalesced buffer and answers them with one GSO send (counters and stamps stay per datagram). The mode is printed at start'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-echo" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l target -d 'Echo server: ADDR:PORT ([IPV6]:PORT)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l streams -d 'Streams: each its own socket and source (1-65536)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l size -d 'Datagram size in bytes (40-65507)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l rate -d 'Total datagrams per second over all streams (1-1000000000)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l duration -d 'Seconds to send for, above 0 and below 10^7 (default 5 unless --count is given)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l count -d 'Datagrams per stream (1-2^40); every one is accounted for (echoed or lost)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l window -d 'Most datagrams outstanding per stream, 1-1048576 (closed loop)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l burst -d 'With --rate: send in bursts of N datagrams (round-robin over the streams) instead of evenly paced, like a NIC coalescing interrupts. 1-4096' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l gso -d 'Datagrams of one stream per send (1-64): above 1, one UDP_SEGMENT (GSO) send carries up to N consecutive datagrams of a stream (within --count and --window); N x --size must stay within 65507 bytes' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l key -d 'RSS key: default (Microsoft), symmetric, random, nic:IF (the NIC\'s key, and its UDP hashed fields), or 40+ bytes of hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l bits -d 'Bucket bits of the server\'s table (1-7); default FreeBSD\'s fls(workers-1)+1' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l server-cpus -d 'The server\'s worker CPUs: a count N (CPUs 0..N-1) or a LIST like 0-3,6 (N 1-8192, ids 0-8191; default: this machine\'s online CPUs)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l src-net -d 'Network to pick source addresses from (address-only hashing); default 127.0.0.0/8 for an IPv4 loopback target, else this host\'s addresses. Addresses assigned here are preferred; for IPv4 a whole network can be made bindable with `ip route add local NET dev lo`. Needs --spread-buckets (without it the kernel picks the source)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l threads -d 'Sender threads (1-1024)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l client-cpus -d 'CPUs the sender threads are pinned to, round-robin (a list, ids 0-8191; default: the last online CPU); "none": unpinned; "owner": one sender thread per server CPU owning some stream\'s bucket, pinned there (on loopback the kernel then processes each datagram on its owner\'s CPU, as NIC RSS would)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l drain -d 'Seconds to wait for the last echoes once sending stops (above 0, below 10^7)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l plot -d 'Write datagrams/s (sent, echoed) over time and the RTT distribution as an SVG chart' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l max -d 'Send as fast as possible (the default when --rate is not given)'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l no-offload -d 'No UDP_GRO on the streams\' sockets (by default on where the kernel has it: a coalesced echo is split into its datagrams here; without it the kernel splits it); --gso is separate'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l spread-buckets -d 'Pick the sources with the tuple finder so that the streams land in distinct buckets of the server\'s table'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l udp-4tuple -d 'Hash UDP on addresses and ports (then streams are spread by source port); default: addresses only, as FreeBSD (spread by source address)'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l no-owner-check -d 'The server does not steer by bucket (udp-echo --steer cpu, reuseport or shared): the per-stream owner check (the match column) does not apply; it is shown as "-" and does not set the exit status (which is 1 when a stream\'s match is NO)'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l json -d 'Print one JSON object (the summary) on stdout'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand udp-load" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand demo" -l duration -d 'Seconds of load, above 0 and at most 3600' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand demo" -l streams -d 'Streams, 1-65536 (default: twice the workers, so every bucket gets one)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand demo" -l cpus -d 'Worker CPUs (default: every online CPU), e.g. 0-3 (ids 0-8191)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand demo" -l port -d 'Server port on 127.0.0.1, 0-65535 (default 0: an ephemeral one)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand demo" -l size -d 'Datagram size in bytes (40-65507)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand demo" -l rate -d 'Datagrams per second each stream sends, 0-10000000 (default 5000; 0: as fast as it can, when the worker sharing a CPU with the load generator shows fewer)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand demo" -l udp-4tuple -d 'Hash UDP on the 4-tuple (streams spread by source port) instead of addresses only (spread by source address in 127.0.0.0/8)'
complete -c rsskit -n "__fish_rsskit_using_subcommand demo" -l json -d 'Print one JSON object: the server\'s and the load\'s summaries'
complete -c rsskit -n "__fish_rsskit_using_subcommand demo" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand demo" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l bind -d 'Address to listen on: ADDR:PORT ([IPV6]:PORT); port 0 picks one' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l cpus -d 'Worker CPUs, one pinned worker each, e.g. 0-3 (ids 0-8191; default: every online CPU)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l steer -d 'How connections reach the workers: cpu (BPF: the CPU that processed the SYN), toeplitz (BPF: Toeplitz hash of the 4-tuple -> bucket -> worker), ebpf (the same bucket in an eBPF SK_REUSEPORT program with live maps; root/CAP_BPF, else toeplitz with the reason printed), kernel (reuseport hash), shared (one listener for all)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l accept-batch -d 'Most connections accepted per wake-up before serving ready ones (1-65536)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l object-size -d 'Size in bytes of the object served at / (0-1073741824)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l root -d 'Serve regular files under this directory (nothing outside it, no symlink escapes; FIFOs, devices and sockets get 403)' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l idle-timeout -d 'Seconds a connection may sit idle (above 0, below 10^7)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l header-timeout -d 'Seconds a client has to send a complete request head, above 0 and below 10^7 (from accept for the first request: a silent connection is closed then)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l duration -d 'Stop after this many seconds, above 0 and below 10^7 (default: until SIGINT/SIGTERM)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l backlog -d 'listen(2) backlog, 1-1048576 (capped by net.core.somaxconn)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l key -d 'RSS key of the toeplitz program: default (Microsoft), symmetric, or hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l file-cache-ms -d 'Milliseconds a --root file of up to 16 KiB is served from a per-worker copy before it is looked up again (0-3600000; 0: open and read it per request). A changed file is served as it was for at most this long' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l sched -d 'Scheduling policy of the workers: batch (SCHED_BATCH: the wake-up for a new connection or request waits until the task running on the worker\'s CPU blocks or ends its slice, so one wake-up serves more; on a CPU shared with a busy task, up to a slice of added latency) or normal (SCHED_OTHER: woken at once). Printed at start' -r -f -a "batch\t''
normal\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l rebalance-every -d 'Seconds between rebalancing rounds, above 0 and below 10^7' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l table -d 'Buckets follow a NIC\'s table: nic:IF (each entry owned by the worker on its queue\'s IRQ CPU); use with --key nic:IF' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l defer-accept -d 'TCP_DEFER_ACCEPT: wake a listener only when the request has arrived (the default; a silent connection is accepted about a second later)'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l no-defer-accept -d 'Accept connections at the handshake, before their request (nginx\'s default; costs a short-lived connection an epoll registration and a wake-up more)'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l quiet -d 'No per-second lines'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l json -d 'Print the final summary as one JSON object on stdout'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l rebalance -d 'Move buckets live from the busiest worker to the least busy one (each worker\'s new connections over --rebalance-every); needs --steer ebpf. Every move is printed (and listed under "rebalance" in --json)'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-serve" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l url -d 'Target: http://HOST[:PORT]/PATH' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l connections -d 'Concurrent connections, spread over the workers (1-10000000)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l duration -d 'Seconds to run (above 0, below 10^7)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l rate -d 'Requests per second over all connections, on a fixed schedule; latency counts from the scheduled start (coordinated omission corrected). Above 0, at most 10^9' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l threads -d 'Worker threads, 1-4096 (default: one per CPU of --cpus, or per online CPU)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l cpus -d 'CPUs the workers are pinned to (round-robin; ids 0-8191; default: online CPUs)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l sources -d 'Source addresses: a CIDR such as 127.0.0.0/8 (connections spread over up to 256 of its addresses)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l timeout -d 'Seconds before a request counts as timed out (above 0, below 10^7)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l src-ports -d 'Source ports: kernel (ephemeral), server (tuple finder: the request\'s Toeplitz hash lands on the paired server worker\'s bucket; for a server with --steer toeplitz), reply (tuple finder: replies hash to this worker\'s CPU under the client\'s RSS table)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l key -d 'RSS key for the tuple finder: default (Microsoft), symmetric, or hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l server-cpus -d 'The server\'s worker CPUs (--src-ports server; ids 0-8191), default: ours' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l plot -d 'Write responses/s per worker over time and the latency distribution as an SVG chart' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l close -d 'One request per connection (Connection: close)'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l keep-alive -d 'Reuse connections (the default)'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l no-pin -d 'Leave the workers unpinned'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l no-sched-batch -d 'Keep the default scheduling policy instead of SCHED_BATCH (with SCHED_BATCH a worker woken by an answer does not preempt a server sharing its CPU after every response)'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l quiet -d 'No per-second lines'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l json -d 'Print the summary as one JSON object on stdout'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand http-load" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l rules -d 'Rule file (at most 65536 rules, 64 MiB)' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l in -d 'Input: pcap:FILE | afpacket:IFNAME | xdp:IFNAME[:QUEUES] (AF_XDP, --engine netisr)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l out -d 'Output of passed frames: pcap:FILE | afpacket:IFNAME | xdp:IFNAME (--engine netisr) | null' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l workers -d 'Worker threads, 1-64 (each with its own state table)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l states-max -d 'Most states over all workers (loose global counter, <= 5% over); 0 = no limit, else at most 4294967296' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l me -d 'Addresses \'me\' stands for, comma-separated (or repeated)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l key -d 'RSS key steering flows to workers: symmetric (default), microsoft, random or hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l duration -d 'Stop a live run after this many seconds, above 0 and below 10^7 (default: until SIGINT/SIGTERM)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l batch -d 'Frames per batch handed to a worker (1-4096)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l engine -d 'Dispatch engine: `netisr` (the data plane\'s netisr dispatch with reassembly and send aggregation; the default) or `own` (the firewall\'s own threaded driver)' -r -f -a "own\t''
netisr\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l order -d 'Cross-worker order of a capture replay: `causal` (default for pcap input) holds a frame that may touch another worker\'s state (a redirected flow, a `limit` track) until every earlier frame is done and every worker\'s clock reached its capture time; other frames never wait. `none` dispatches as frames come (live input: always)' -r -f -a "causal\t''
none\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l locked -d 'One global state table behind a read-write lock (the baseline)'
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l quiet -d 'No per-second status lines'
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l json -d 'Print the summary as one JSON object'
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l stop-at-bad-record -d 'Capture input: a corrupt record ends the input quietly (exit 0) instead of with an error naming the record'
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand firewall" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l in -d 'Input: pcap:FILE | afpacket:IFNAME | xdp:IFNAME[:QUEUES] | gen[:SIZE]' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l out -d 'Output: pcap:FILE | pcapng:FILE | afpacket:IFNAME | xdp:IFNAME | null' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l workers -d 'Worker threads (1-64)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l cpus -d 'Pin worker i to the i-th CPU of this list (e.g. 0-3 or 0,2)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l batch -d 'Packets per batch (1-256)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l prefetch -d 'Prefetch: none, header, bucket or both' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l stride -d 'Packet buffer stride in bytes, 128-65536 (1920 avoids 2048-byte cache aliasing)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l queue -d 'Slots in each worker-to-worker queue, 2-1048576 (netisr queue limit)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l frag-timeout -d 'Fragment reassembly timeout in seconds, above 0 and below 10^7 (IPv4 and IPv6; default 30 and 60)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l flush-packets -d 'Flush output after this many packets, 1-1024 (1 = no aggregation)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l flush-bytes -d 'Flush output after this many bytes (1-4294967295)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l loop -d 'Play a capture this many times (1-18446744073709551615)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l duration -d 'Stop after this many seconds (above 0, below 10^7)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l packets -d 'gen: frames per worker, 1-18446744073709551615 (with --gen-frag: rounded up to whole datagrams)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l flows -d 'gen: distinct flows (1-16777216)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l gen-frag -d 'gen: send UDP datagrams of this many IP bytes cut into fragments of at most 1500 bytes, 1501-65535 (the reassembly benchmark: 9000 gives 7 fragments)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l key -d 'RSS key of the NIC-style hash: default (Microsoft), symmetric, nic:IF, or hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l table -d 'Buckets follow a NIC\'s table: nic:IF (each entry owned by the worker pinned to its queue\'s IRQ CPU; needs --cpus); use with --key nic:IF' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l plot -d 'Write packets/s handled per worker over time as an SVG chart at the end' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l backpressure -d 'When a queue to another worker is full, hold the packet and pause the input (a NIC sending pause frames) instead of dropping it (QDrops). The default for capture input (nothing is lost); see --drop-when-full'
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l drop-when-full -d 'Capture input: drop a packet whose queue is full (counted as queue_full) instead of pausing the input'
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l stop-at-bad-record -d 'Capture input: a corrupt record ends the input quietly (exit 0) instead of with an error naming the record'
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l udp-4tuple -d 'Hash UDP on the 4-tuple (FreeBSD\'s default is addresses only)'
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l timing -d 'Replay a capture with its timing (default: as fast as possible)'
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l gen-owned -d 'gen: each worker\'s generator makes only flows that worker owns (as if a NIC had already steered them: all direct dispatch). Default: random flows, so with N workers (N-1)/N of them are queued to another worker (software steering, like RPS)'
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l json -d 'Print the summary as one JSON object'
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l quiet -d 'No status lines'
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand pipeline" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -l pid -d 'The server\'s process id (nginx: the master), 1-4194304; its children are searched too' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -l port -d 'Only sockets on this local port, 1-65535 (default: every reuseport group of the process tree)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -l proto -d 'Only this transport (default: both)' -r -f -a "tcp\t''
udp\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -l steer -d 'Steering program' -r -f -a "cpu\t'The socket of the worker pinned to the CPU processing the packet'
toeplitz\t'The worker owning the packet\'s Toeplitz bucket'"
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -l workers -d 'The number of workers expected per group, 1-8192 (refuse otherwise)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -l key -d 'RSS key for --steer toeplitz: default (Microsoft), symmetric, random, or 40+ bytes of hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -l bits -d 'Bucket bits for --steer toeplitz (1-7); default FreeBSD\'s fls(workers-1)+1' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -l udp-4tuple -d 'Hash UDP on addresses and ports (--steer toeplitz); default addresses only'
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -l json -d 'Print JSON'
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -l detach -d 'Detach the program: the kernel\'s reuseport hash picks sockets again'
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand steer" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rsskit -n "__fish_rsskit_using_subcommand run" -l port -d 'Only sockets on this local port, 1-65535 (default: every reuseport group of the process tree)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand run" -l proto -d 'Only this transport (default: both)' -r -f -a "tcp\t''
udp\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand run" -l steer -d 'Steering program' -r -f -a "cpu\t'The socket of the worker pinned to the CPU processing the packet'
toeplitz\t'The worker owning the packet\'s Toeplitz bucket'"
complete -c rsskit -n "__fish_rsskit_using_subcommand run" -l workers -d 'The number of workers expected per group, 1-8192 (refuse otherwise)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand run" -l key -d 'RSS key for --steer toeplitz: default (Microsoft), symmetric, random, or 40+ bytes of hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand run" -l bits -d 'Bucket bits for --steer toeplitz (1-7); default FreeBSD\'s fls(workers-1)+1' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand run" -l timeout -d 'Give up (and stop the server) if its group is not complete after this many seconds (above 0, below 10^7)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand run" -l udp-4tuple -d 'Hash UDP on addresses and ports (--steer toeplitz); default addresses only'
complete -c rsskit -n "__fish_rsskit_using_subcommand run" -l json -d 'Print JSON'
complete -c rsskit -n "__fish_rsskit_using_subcommand run" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rsskit -n "__fish_rsskit_using_subcommand top" -l iface -d 'Also show this interface\'s packets/bytes and its queue IRQs/s' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand top" -l interval -d 'Seconds between samples (above 0, below 10^7)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand top" -l count -d 'Stop after N samples, 1-1073741824 (default: until SIGINT/SIGTERM)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand top" -l duration -d 'Stop after this many seconds, above 0 and below 10^7 (default: until SIGINT/SIGTERM)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand top" -l cpus -d 'Only these CPUs (a list such as 0-3,8), default every CPU in the counters' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand top" -l plot -d 'Write packets/s per CPU over time as an SVG chart at the end' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand top" -l sysroot -d 'Read a tree shaped like /sys and /proc under DIR instead (tests)' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand top" -l json -d 'One JSON object per sample, one per line'
complete -c rsskit -n "__fish_rsskit_using_subcommand top" -l lines -d 'Plain text lines even on a terminal (no full-screen redraw)'
complete -c rsskit -n "__fish_rsskit_using_subcommand top" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand top" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -l iface -d 'The interface to attach to' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -l cpus -d 'CPUs the buckets are spread over (a list such as 0-3,8; default every online CPU)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -l key -d 'RSS key: default (Microsoft), symmetric, random, nic:IF or 40+ bytes of hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -l hash-types -d 'Hash types: default (ipv4,tcp-ipv4,ipv6,tcp-ipv6), all, or a comma list of ipv4,tcp-ipv4,udp-ipv4,ipv6,tcp-ipv6,udp-ipv6' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -l bits -d 'Bucket bits (1-7); default FreeBSD\'s fls(ncpus-1)+1' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -l queue-size -d 'Frames queued per target CPU before the cpumap drops (1-16384)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -l mode -d 'XDP mode: auto (native, else generic), native or generic' -r -f -a "auto\t''
native\t''
generic\t''"
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -l duration -d 'Stop after this many seconds, above 0 and below 10^7 (default: until SIGINT/SIGTERM)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -l detach -d 'Remove an rsskit XDP program left attached to IF, then exit'
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -l json -d 'One JSON object per second, one per line; the last has "final": true'
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand xdp-steer" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and not __fish_seen_subcommand_from toeplitz firewall help" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and not __fish_seen_subcommand_from toeplitz firewall help" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and not __fish_seen_subcommand_from toeplitz firewall help" -f -a "toeplitz" -d 'ns per Toeplitz hash for each implementation (reference, fast, batch)'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and not __fish_seen_subcommand_from toeplitz firewall help" -f -a "firewall" -d 'Firewall: short-lived TCP flows, per-worker state tables vs the locked table'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and not __fish_seen_subcommand_from toeplitz firewall help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from toeplitz" -l iters -d 'Hashes per round for the fast and batch paths (1024-1073741824)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from toeplitz" -l rounds -d 'Rounds (1-1000); the median is reported' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from toeplitz" -l count -d 'Distinct pre-generated inputs cycled through (a power of two, 16-1048576)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from toeplitz" -l seed -d 'Seed of the input generator (0-18446744073709551615)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from toeplitz" -l key -d 'RSS key: default (Microsoft), symmetric, random, or 40+ bytes of hex' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from toeplitz" -l peers -d 'Merge a peer harness\'s results (JSON of the same shape, e.g. from bench/peers/dpdk/thash_bench.c); its "check" must match ours' -r -F
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from toeplitz" -l json -d 'Print one JSON object'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from toeplitz" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from toeplitz" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from firewall" -l flows -d 'Distinct flows (8 frames each) per round (1-2000000)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from firewall" -l rounds -d 'Times every worker replays its frames per run (1-1000)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from firewall" -l runs -d 'Runs per configuration (1-101); the median is reported' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from firewall" -l workers -d 'Worker counts to measure, comma-separated (each 1-64)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from firewall" -l batch -d 'Frames per batch (1-4096)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from firewall" -l seed -d 'Seed of the flow generator (0-18446744073709551615)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from firewall" -l replay-flows -d 'Flows of the ordered vs unordered replay comparison, 0-2000000 (0: skip it)' -r
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from firewall" -l json -d 'Print one JSON object'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from firewall" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from firewall" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "toeplitz" -d 'ns per Toeplitz hash for each implementation (reference, fast, batch)'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "firewall" -d 'Firewall: short-lived TCP flows, per-worker state tables vs the locked table'
complete -c rsskit -n "__fish_rsskit_using_subcommand bench; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rsskit -n "__fish_rsskit_using_subcommand completions" -l allow-weak-key -d 'Use a --key that cannot reach every RSS bucket (e.g. all zero: every flow in bucket 0) instead of refusing it'
complete -c rsskit -n "__fish_rsskit_using_subcommand completions" -s h -l help -d 'Print help'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "hash" -d 'Toeplitz hash of a flow: hash, bucket and CPU'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "table" -d 'DragonFly ringmap: ring -> CPU binding and the NIC redirect table'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "find" -d 'Find source ports or addresses whose flows land in a chosen bucket or CPU'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "info" -d 'The host\'s RSS setup: CPUs, NUMA, per-interface queues, keys, tables, IRQs, RPS'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "capture" -d 'Copy the host facts rsskit reads into DIR, for `plan`, `check` and `info --from DIR` offline'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "plan" -d 'Tuning plan per device: CPUs, queue -> CPU (ringmap), table, key, IRQ affinity, XPS, RPS, steering'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "apply" -d 'Apply a plan (diff, --dry-run, save, read back) or --restore a saved state'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "check" -d 'Does this host keep every flow on one CPU? Verdict and reasons per device (exit 1 if not)'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "persist" -d 'Persisted plans (from `apply --persist`): list, apply one device\'s, remove'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "agent" -d 'Keep every persisted plan applied: watches link events, re-checks, puts back what drifted; Prometheus metrics'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "udp-echo" -d 'Per-CPU UDP echo/sink server: pinned workers, steered reuseport sockets, per-worker counters'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "udp-load" -d 'UDP load generator: N streams spread over the server\'s buckets, RTT, per-stream steering check'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "demo" -d 'Loopback demo: echo server (one pinned worker per CPU, toeplitz steering) + spread load'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "http-serve" -d 'CPU-local HTTP/1.1 server: pinned worker per CPU, steered reuseport listeners, accept cap'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "http-load" -d 'HTTP/1.1 load tester: pinned workers, tens of thousands of connections, latency histogram'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "firewall" -d 'Per-CPU stateful firewall (ipfw-style rules, per-worker state tables, redirect) on pcap or AF_PACKET'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "pipeline" -d 'User-space data plane: NIC-style hash, netisr dispatch to per-CPU workers, reassembly, re-injection'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "steer" -d 'Steer a running server\'s SO_REUSEPORT group (nginx, ...) to its CPU-pinned workers'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "run" -d 'Start a server and steer its SO_REUSEPORT group once its workers are up'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "top" -d 'Live per-CPU NET_RX softirqs and packets/s, queue IRQs/s, imbalance (like top, for the network)'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "xdp-steer" -d 'Software RSS in XDP: Toeplitz-hash each frame and redirect it to its bucket\'s CPU (cpumap)'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "bench" -d 'Micro-benchmarks'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "completions" -d 'Print the shell completion script (bash, zsh, fish, ...) to stdout'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and not __fish_seen_subcommand_from hash table find info capture plan apply check persist agent udp-echo udp-load demo http-serve http-load firewall pipeline steer run top xdp-steer bench completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and __fish_seen_subcommand_from persist" -f -a "list" -d 'The persisted plans, and which interface each matches now'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and __fish_seen_subcommand_from persist" -f -a "apply" -d 'Apply the persisted plan of IF now (run by rsskit-apply@IF.service)'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and __fish_seen_subcommand_from persist" -f -a "remove" -d 'Remove IF\'s plan; without IF every plan, the rule, the unit and rsskit\'s irqbalance bans'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "toeplitz" -d 'ns per Toeplitz hash for each implementation (reference, fast, batch)'
complete -c rsskit -n "__fish_rsskit_using_subcommand help; and __fish_seen_subcommand_from bench" -f -a "firewall" -d 'Firewall: short-lived TCP flows, per-worker state tables vs the locked table'
