//! Property tests (fuzzing) of the ioctl decoding and validation that the
//! kernel module runs on user input: arbitrary numbers and bytes never panic,
//! errors map to the right errno, and whatever validates is within bounds.
use prescient_uapi::*;
use proptest::prelude::*;

fn base() -> prescient_core::Params {
    kernel_default_params(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn any_command_number(cmd in any::<u32>()) {
        match Cmd::decode(cmd) {
            Ok(c) => {
                prop_assert_eq!(c.number(), cmd);
                prop_assert_eq!(ioc_type(cmd), IOC_MAGIC);
                prop_assert!(c.in_size() <= Stats::SIZE && c.out_size() <= Stats::SIZE);
            }
            Err(e) => prop_assert_eq!(e.errno(), errno::ENOTTY),
        }
    }

    #[test]
    fn near_miss_numbers_are_rejected(i in 0usize..COMMANDS.len(), bit in 0u32..32) {
        let n = COMMANDS[i].1 ^ (1 << bit);
        // flipping any bit of a valid number gives an unknown one (or another command)
        match Cmd::decode(n) {
            Ok(c) => prop_assert_eq!(c.number(), n),
            Err(e) => prop_assert_eq!(e, Error::UnknownCommand(n)),
        }
    }

    #[test]
    fn params_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        match ParamsAbi::decode_valid(&bytes, &base()) {
            Ok((a, p)) => {
                prop_assert_eq!(bytes.len(), ParamsAbi::SIZE);
                prop_assert!(p.validate().is_ok());
                prop_assert!(a.inflight_limit >= 1 && a.inflight_limit <= MAX_INFLIGHT);
                prop_assert!(a.enabled <= 1);
                prop_assert_eq!(a.to_bytes().to_vec(), bytes.clone());
            }
            Err(e) => prop_assert_eq!(e.errno(), errno::EINVAL),
        }
    }

    #[test]
    fn params_fields(rows in 0u32..70000, assoc in 0u32..20, succs in 0u32..20, look in 0u32..70,
                     infl in 0u32..2000, wm in 0u32..200, budget in any::<u64>(), en in 0u32..3, mode in 0u32..3) {
        let a = ParamsAbi { rows, assoc, succs, lookahead: look, inflight_limit: infl,
            pre_evict_watermark_pct: wm, residency_budget_bytes: budget, enabled: en,
            mode, reserved1: 0 };
        let r = a.to_engine(&base());
        let engine_ok = prescient_core::Params { rows, assoc, succs, lookahead: look, ..base() }.validate().is_ok();
        prop_assert_eq!(r.map(|p| p.mode == prescient_core::Mode::ExecId).unwrap_or(mode == 1), mode == 1);
        let own_ok = (1..=MAX_INFLIGHT).contains(&infl) && (1..=100).contains(&wm) && en <= 1 && mode <= 1
            && budget % (2 << 20) == 0 && budget <= (prescient_core::Params::MAX_RESIDENT_BLOCKS as u64) << 21;
        prop_assert_eq!(r.is_ok(), engine_ok && own_ok);
    }

    #[test]
    fn ranges(handle in any::<u64>(), addr in any::<u64>(), len in any::<u64>(), flags in 0u64..4) {
        let r = RangeAbi { handle, addr, len, flags };
        if r.check().is_ok() {
            prop_assert!(handle != 0 && len > 0 && len <= MAX_RANGE_LEN && flags <= MARK_NO_POPULATE);
            prop_assert!(addr.checked_add(len).is_some_and(|e| e <= USER_ADDR_END));
            let b = r.whole_blocks();
            prop_assert!(b.start << 21 >= addr && (b.end << 21) <= addr + len);
        }
        let bytes = r.to_bytes();
        prop_assert_eq!(RangeAbi::from_bytes(&bytes).unwrap(), r);
    }

    #[test]
    fn targets(kind in 0u32..5, id in any::<u32>(), handle in any::<u64>()) {
        let t = Target { kind, id, handle };
        if t.check_attach().is_ok() {
            prop_assert!(kind == TARGET_FD || kind == TARGET_PID);
            prop_assert_eq!(handle, 0);
            prop_assert!(id <= i32::MAX as u32);
        }
        if t.check_detach().is_ok() {
            prop_assert!(kind <= TARGET_HANDLE);
        }
    }

    #[test]
    fn any_bytes_for_every_struct(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
        let _ = Version::from_bytes(&bytes);
        let _ = Target::from_bytes(&bytes).map(|t| (t.check_attach(), t.check_detach()));
        let _ = ExecIdAbi::from_bytes(&bytes).map(|t| t.check());
        let _ = RangeAbi::from_bytes(&bytes).map(|t| t.check());
        let _ = GpuAbi::from_bytes(&bytes).map(|t| t.check());
        if let Ok(s) = Stats::from_bytes(&bytes) { prop_assert_eq!(s.to_bytes().to_vec(), bytes.clone()); }
    }

    #[test]
    fn driver_versions(s in "[0-9.]{0,14}") {
        if let Some(v) = parse_driver_version(s.as_bytes()) {
            let text = format!("{}.{}.{}", v >> 32, (v >> 16) & 0xffff, v & 0xffff);
            let mut norm: Vec<u64> = s.split('.').map(|p| p.parse().unwrap()).collect();
            // Two components ("580.142"): patch 0.
            prop_assert!(norm.len() == 2 || norm.len() == 3, "{}", text);
            norm.resize(3, 0);
            prop_assert_eq!(norm, vec![v >> 32, (v >> 16) & 0xffff, v & 0xffff], "{}", text);
        }
    }
}
