//! `prescientctl attach PID` and `detach PID`.

use crate::client::{done, Client, Res};
use prescient_uapi::control::Request;
use std::path::Path;

pub fn attach(socket: &Path, pid: i32) -> Res<()> {
    done(Client::connect(socket)?.call(&Request::Attach { pid })?)
}

pub fn detach(socket: &Path, pid: i32) -> Res<()> {
    done(Client::connect(socket)?.call(&Request::Detach { pid })?)
}
