//! The HTTP server's counters: what the connection core ([`super::conn`])
//! counts and the event loops ([`super::server`]) publish, apart from both
//! so that neither imports the other for them.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

/// Statuses counted separately; anything else is counted as "other".
pub const STATUS_CODES: [u16; 11] = [200, 400, 403, 404, 405, 408, 413, 431, 500, 501, 505];
const NSTATUS: usize = STATUS_CODES.len() + 1;
const NFIELDS: usize = 8 + NSTATUS;

/// One worker's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServeCounters {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed.
    pub closed: u64,
    /// Requests parsed (answered or refused).
    pub requests: u64,
    /// Request bytes read.
    pub bytes_in: u64,
    /// Response bytes written (headers and bodies).
    pub bytes_out: u64,
    /// Connections closed for being idle.
    pub timeouts_idle: u64,
    /// Request heads not complete within the header timeout (answered 408).
    pub timeouts_header: u64,
    /// Connections reset or failed by the peer.
    pub resets: u64,
    /// Responses by status: [`STATUS_CODES`], then "other".
    pub status: [u64; NSTATUS],
}

impl ServeCounters {
    fn to_array(self) -> [u64; NFIELDS] {
        let mut a = [0; NFIELDS];
        a[..8].copy_from_slice(&[
            self.accepted,
            self.closed,
            self.requests,
            self.bytes_in,
            self.bytes_out,
            self.timeouts_idle,
            self.timeouts_header,
            self.resets,
        ]);
        a[8..].copy_from_slice(&self.status);
        a
    }

    fn from_array(a: &[u64; NFIELDS]) -> ServeCounters {
        let mut status = [0; NSTATUS];
        status.copy_from_slice(&a[8..]);
        ServeCounters {
            accepted: a[0],
            closed: a[1],
            requests: a[2],
            bytes_in: a[3],
            bytes_out: a[4],
            timeouts_idle: a[5],
            timeouts_header: a[6],
            resets: a[7],
            status,
        }
    }

    /// All responses sent.
    pub fn responses(&self) -> u64 {
        self.status.iter().sum()
    }

    /// Responses with `code` (0 for "other").
    pub fn with_status(&self, code: u16) -> u64 {
        STATUS_CODES.iter().position(|&c| c == code).map_or(self.status[NSTATUS - 1], |i| self.status[i])
    }

    pub(crate) fn count_status(&mut self, code: u16) {
        let i = STATUS_CODES.iter().position(|&c| c == code).unwrap_or(NSTATUS - 1);
        self.status[i] += 1;
    }

    /// Takes back a [`ServeCounters::count_status`] (an answer replaced).
    pub(crate) fn uncount_status(&mut self, code: u16) {
        let i = STATUS_CODES.iter().position(|&c| c == code).unwrap_or(NSTATUS - 1);
        self.status[i] -= 1;
    }

    /// Adds another worker's counts.
    pub fn add(&mut self, o: &ServeCounters) {
        let (mut a, b) = (self.to_array(), o.to_array());
        for (x, y) in a.iter_mut().zip(b) {
            *x += y;
        }
        *self = ServeCounters::from_array(&a);
    }

    /// The sum of some workers' counts.
    pub fn total<'a>(it: impl IntoIterator<Item = &'a ServeCounters>) -> ServeCounters {
        let mut t = ServeCounters::default();
        for c in it {
            t.add(c);
        }
        t
    }

    /// `{"200": n, ...}` for the statuses seen.
    pub fn status_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (i, &n) in self.status.iter().enumerate() {
            if n > 0 {
                let k = STATUS_CODES.get(i).map_or("other".to_string(), |c| c.to_string());
                m.insert(k, n.into());
            }
        }
        m.into()
    }

    /// The `--json` form (statuses by code).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "accepted": self.accepted,
            "closed": self.closed,
            "requests": self.requests,
            "responses": self.responses(),
            "status": self.status_json(),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "timeouts_idle": self.timeouts_idle,
            "timeouts_header": self.timeouts_header,
            "resets": self.resets,
        })
    }

    /// `200:n 404:n ...` for the statuses seen.
    pub fn status_line(&self) -> String {
        let mut v = Vec::new();
        for (i, &n) in self.status.iter().enumerate() {
            if n > 0 {
                v.push(format!("{}:{n}", STATUS_CODES.get(i).map_or("other".to_string(), |c| c.to_string())));
            }
        }
        if v.is_empty() {
            "-".into()
        } else {
            v.join(" ")
        }
    }
}

/// A worker's counters as the reporting thread sees them: written by the
/// worker alone (relaxed stores), read by anyone.
#[derive(Debug, Default)]
pub struct SharedCounters {
    v: [AtomicU64; NFIELDS],
}

impl SharedCounters {
    /// Stores the worker's counts (the worker alone calls this).
    pub fn publish(&self, c: &ServeCounters) {
        for (slot, x) in self.v.iter().zip(c.to_array()) {
            slot.store(x, Ordering::Relaxed);
        }
    }

    /// The worker's counts as last published.
    pub fn snapshot(&self) -> ServeCounters {
        let mut a = [0; NFIELDS];
        for (x, slot) in a.iter_mut().zip(&self.v) {
            *x = slot.load(Ordering::Relaxed);
        }
        ServeCounters::from_array(&a)
    }
}
