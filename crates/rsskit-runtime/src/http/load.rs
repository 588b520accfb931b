//! `rsskit http-load` (see below).
