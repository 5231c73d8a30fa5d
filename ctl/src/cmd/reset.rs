//! `prescientctl reset`: clear the correlation tables.

use crate::client::{done, Client, Res};
use prescient_uapi::control::Request;
use std::path::Path;

pub fn run(socket: &Path) -> Res<()> {
    done(Client::connect(socket)?.call(&Request::Reset)?)
}
