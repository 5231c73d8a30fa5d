//! The control protocol, now prescient-uapi's `control` module (kept for the daemon's old paths).
pub use prescient_uapi::control::*;

#[cfg(test)]
mod tests {

    #[test]
    fn the_config_files_defaults_pass_the_modules_check() {
        let good = crate::config::EngineConfig::default().params();
        assert_eq!(good.check(), Ok(()));
    }
}
