//! End-to-end tests of the API emulator, driven by real kubectl and a kube-rs 5 client.

mod auth;
mod cel;
mod cli;
mod client;
mod common;
mod controller;
mod faults;
mod kubectl;
mod ownership;
mod webhooks;
