//! rsskit user-space data plane.
