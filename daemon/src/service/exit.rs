//! prescientd's exit status as a service (sysexits).
//!
//! 0 after SIGTERM/SIGINT (processes the daemon attached are detached, the
//! socket removed; the module keeps the parameters in force), 78 config
//! invalid (EX_CONFIG), 69 module missing with `on_missing_module = "exit"`
//! (EX_UNAVAILABLE), 77 permission denied (EX_NOPERM), 1 anything else at
//! start (port in use, socket busy, a configured pid the module refuses).
//! Nothing is left half-applied by a failed start: parameters are restored
//! and attachments undone.

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILURE: i32 = 1;
pub const EXIT_UNAVAILABLE: i32 = 69;
pub const EXIT_NOPERM: i32 = 77;
pub const EXIT_CONFIG: i32 = 78;
