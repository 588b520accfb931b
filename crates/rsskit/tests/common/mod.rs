//! Shared fixtures for the integration tests.
#![allow(dead_code)]

pub mod agent;
pub mod fixture;
pub mod http;
pub mod lab;
pub mod netns;
pub mod proc;
pub mod steer;
