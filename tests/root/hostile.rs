//! A battery of bad inputs to every command (issue 19): each must end, within a time limit, with
//! exit status 1 (an error) or 2 (a usage error), a message naming what was wrong, and no panic;
//! runaway programs stop at the run limit with a fault naming the pc and the instruction.
//!
//! [`battery`] lists the cases; `the_battery_of_bad_inputs_is_refused_clearly` runs them all (one
//! process each, a few seconds in all) and reports every case that panicked, hung or said
//! nothing useful.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest one bad input may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(60);

/// One bad input: arguments, extra environment, and a text stderr must contain.
struct Case {
    args: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
    want: &'static str,
}

fn case(args: &[&str], want: &'static str) -> Case {
    Case {
        args: args.iter().map(|s| s.to_string()).collect(),
        env: Vec::new(),
        want,
    }
}

/// A fresh scratch directory under the target directory, with the files the cases use; one
/// per test (`test`), as tests run in parallel and each starts by clearing its own.
fn fixtures(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("hostile")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let w = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
    w(
        "spin.s",
        b".program spin\n smov s1, 0\ntop:\n sadd s1, s1, 1\n br top\n",
    );
    w(
        "args.s",
        b".program args\n.arg x buffer\n.arg n scalar\n nop\n",
    );
    w(
        "dma32.s",
        b".program big\n.smem 64, 1, 1, 0xffffffff, 0, 0\n smov s1, 64\n smov s2, 0\n dma vmem[s2], vmem[s2], desc=s1, sem=sem0\n",
    );
    w(
        "mxuq.s",
        b".program q\n smov s1, 128\n smov s2, 0\n mxu.lw.bf16 mxu0, [s2], rows=s1, cols=s1, stride=s1\n smov s3, 0xffffffff\n mxu.mm.bf16.p1 mxu0, [s2], rows=s3, stride=s2\n",
    );
    w(
        "wait.s",
        b".program w\n smov s1, 0x80000001\n sem.wait sem0, s1\n",
    );
    w("empty.s", b"");
    w("garbage.s", b"vadd.f32 v1, v2,\n@@@\n");
    w("latin1.s", b".program \xe9t\xe9\n");
    w("garbage.bin", b"TPUEMU\0\0\x01\0\0\0\xff\xff\xff\xff");
    w("bad_clock.toml", b"base = \"v5e\"\nclock_hz = inf\n");
    w(
        "bad_vmem.toml",
        b"base = \"v5e\"\nvmem_bytes = 1099511627776\n",
    );
    w(
        "bad_latency.toml",
        b"base = \"v5e\"\nhbm_latency_ns = 1e300\n",
    );
    w("bad_syntax.toml", b"base = [[[\n");
    w("not_utf8.toml", b"base = \"\xff\"\n");
    w("garbage.safetensors", b"not a safetensors file at all");
    let header = br#"{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#;
    let mut huge = (header.len() as u64).to_le_bytes().to_vec();
    huge.extend_from_slice(header);
    huge.extend_from_slice(&[0; 8]);
    w("huge_shape.safetensors", &huge);
    w("huge_header.safetensors", &u64::MAX.to_le_bytes());
    w(
        "nan.json",
        br#"[{"ph":"X","name":"a","ts":"NaN","dur":1,"pid":1,"tid":1}]"#,
    );
    w(
        "negdur.json",
        br#"[{"ph":"X","name":"a","ts":0,"dur":-5,"pid":1,"tid":1}]"#,
    );
    w(
        "backwards.json",
        br#"[{"ph":"B","name":"a","ts":10,"pid":1,"tid":1},{"ph":"E","ts":5,"pid":1,"tid":1}]"#,
    );
    w("notjson.json", b"{{{{");
    std::fs::create_dir_all(dir.join("golden_bad")).unwrap();
    std::fs::create_dir_all(dir.join("golden_empty")).unwrap();
    w("golden_bad/x.json", b"{\"format\": 7}");
    dir
}

/// Every bad input, with the text its error must contain.
fn battery(d: &Path) -> Vec<Case> {
    let p = |name: &str| d.join(name).display().to_string();
    let (spin, args, dma32, mxuq, wait) = (
        p("spin.s"),
        p("args.s"),
        p("dma32.s"),
        p("mxuq.s"),
        p("wait.s"),
    );
    let mut v = Vec::new();

    // Programs that never halt, or ask for absurd work: the run limit or a located fault.
    for extra in [&[][..], &["--timing-only"][..]] {
        let mut a = vec!["run", &spin, "--max-instructions", "100000"];
        a.extend(extra);
        v.push(case(&a, "at pc 2 (`br @1`)"));
        let mut a = vec!["run", &spin, "--max-cycles", "50000"];
        a.extend(extra);
        v.push(case(&a, "--max-cycles"));
        let mut a = vec!["run", &dma32];
        a.extend(extra);
        v.push(case(&a, "at pc 2"));
        let mut a = vec!["run", &mxuq];
        a.extend(extra);
        v.push(case(&a, "streaming 4294967295 rows"));
        let mut a = vec!["run", &wait];
        a.extend(extra);
        v.push(case(&a, "deadlock"));
    }
    // The limits themselves.
    for (flag, value) in [
        ("--max-instructions", "0"),
        ("--max-instructions", "-5"),
        ("--max-instructions", "18446744073709551616"),
        ("--max-instructions", "4611686018427387905"),
        ("--max-instructions", "many"),
        ("--max-cycles", "0"),
        ("--max-cycles", "-1"),
        ("--max-cycles", "1e9"),
    ] {
        v.push(case(&["run", &spin, flag, value], flag));
    }

    // `run` arguments: sizes, scalars, bindings, cores.
    let run = |extra: &[&str]| {
        let mut a = vec!["run".to_string(), args.clone()];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    for (alloc, want) in [
        ("x=18446744073709551615", "--alloc"),
        ("x=18446744073709551616", "--alloc"),
        ("x=f32:4294967296x4294967296", "HBM"),
        ("x=f32:18446744073709551615x2", "HBM"),
        ("x=i64:4611686018427387904", "HBM"),
        ("x=f99:4", "unknown dtype"),
        ("x=f32:-1", "dimension"),
        ("x=f32:axb", "dimension"),
        ("x=f32:", "dimension"),
        ("x=", "--alloc"),
        ("x", "--alloc"),
        ("=16", "--alloc"),
    ] {
        let a = run(&["--alloc", alloc, "--scalar", "n=1"]);
        v.push(Case {
            args: a,
            env: Vec::new(),
            want,
        });
    }
    for (scalar, want) in [
        ("n=4294967296", "32-bit"),
        ("n=-2147483649", "32-bit"),
        ("n=0x1ffffffff", "32-bit"),
        ("n=99999999999999999999999999999999999999999", "32-bit"),
        ("n=1e39", "f32"),
        ("n=-1e39", "f32"),
        ("n=abc", "neither"),
        ("n=", "--scalar"),
        ("n=0x", "--scalar"),
        ("n=--1", "--scalar"),
    ] {
        let a = run(&["--alloc", "x=16", "--scalar", scalar]);
        v.push(Case {
            args: a,
            env: Vec::new(),
            want,
        });
    }
    for (extra, want) in [
        (
            &["--alloc", "x=16", "--alloc", "x=16", "--scalar", "n=1"][..],
            "bound twice",
        ),
        (
            &["--alloc", "x=16", "--scalar", "n=1", "--scalar", "n=2"][..],
            "bound twice",
        ),
        (&["--scalar", "x=1", "--scalar", "n=1"][..], "is a buffer"),
        (&["--alloc", "x=16", "--alloc", "n=16"][..], "is a scalar"),
        (&["--alloc", "x=16"][..], "n (scalar)"),
        (
            &["--alloc", "x=16", "--scalar", "n=1", "--scalar", "zz=1"][..],
            "no argument `zz`",
        ),
        (
            &["--alloc", "x=16", "--scalar", "n=1", "--cores", "0"][..],
            "--cores",
        ),
        (
            &["--alloc", "x=16", "--scalar", "n=1", "--cores", "99"][..],
            "--cores",
        ),
        (
            &["--alloc", "x=16", "--scalar", "n=1", "--cores", "-1"][..],
            "--cores",
        ),
        (
            &[
                "--alloc",
                "x=16",
                "--scalar",
                "n=1",
                "--timing-only",
                "--output",
                "o.safetensors",
            ][..],
            "--timing-only",
        ),
        (
            &["--input", "x=/nonexistent.safetensors", "--scalar", "n=1"][..],
            "nonexistent",
        ),
    ] {
        v.push(Case {
            args: run(extra),
            env: Vec::new(),
            want,
        });
    }
    for file in [
        "garbage.safetensors",
        "huge_shape.safetensors",
        "huge_header.safetensors",
        "spin.s",
    ] {
        let input = format!("x={}", p(file));
        v.push(Case {
            args: run(&["--input", &input, "--scalar", "n=1"]),
            env: Vec::new(),
            want: "--input",
        });
    }
    let input = format!("x={}:nope", p("garbage.safetensors"));
    v.push(Case {
        args: run(&["--input", &input, "--scalar", "n=1"]),
        env: Vec::new(),
        want: "--input",
    });
    // Programs that are not programs.
    // (An empty file is an empty assembly program, which runs: only `disasm` refuses it.)
    v.push(case(&["disasm", &p("empty.s")], "empty.s"));
    for (file, want) in [
        ("garbage.s", "garbage.s:"),
        ("latin1.s", "latin1.s"),
        ("garbage.bin", "garbage.bin"),
        ("missing.s", "missing.s"),
        ("golden_bad", "golden_bad"),
    ] {
        v.push(case(&["run", &p(file)], want));
        v.push(case(&["asm", &p(file), "-o", &p("out.bin")], want));
        v.push(case(&["disasm", &p(file)], want));
    }

    // Chip figures: files and overrides, on every command that takes a chip.
    let chip_cases: Vec<(Vec<String>, &'static str)> = vec![
        (vec!["--chip".into(), p("bad_clock.toml")], "clock_hz"),
        (vec!["--chip".into(), p("bad_vmem.toml")], "vmem_bytes"),
        (
            vec!["--chip".into(), p("bad_latency.toml")],
            "hbm_latency_ns",
        ),
        (
            vec!["--chip".into(), p("bad_syntax.toml")],
            "bad_syntax.toml",
        ),
        (vec!["--chip".into(), p("not_utf8.toml")], "not_utf8.toml"),
        (vec!["--chip".into(), p("missing.toml")], "missing.toml"),
        (vec!["--chip".into(), "v99".into()], "unknown chip `v99`"),
        (vec!["--set".into(), "clock_hz=inf".into()], "clock_hz"),
        (vec!["--set".into(), "clock_hz=nan".into()], "clock_hz"),
        (vec!["--set".into(), "clock_hz=0".into()], "clock_hz"),
        (
            vec!["--set".into(), "hbm_latency_ns=1e300".into()],
            "hbm_latency_ns",
        ),
        (
            vec!["--set".into(), "hbm_latency_ns=-1".into()],
            "hbm_latency_ns",
        ),
        (
            vec!["--set".into(), "ici_link_bytes_per_s=1e-300".into()],
            "ici_link_bytes_per_s",
        ),
        (
            vec!["--set".into(), "hbm_bytes_per_s=1e-300".into()],
            "hbm_bytes_per_s",
        ),
        (
            vec!["--set".into(), "smem_bytes=1099511627776".into()],
            "smem_bytes",
        ),
        (
            vec!["--set".into(), "vmem_bytes=18446744073709551615".into()],
            "vmem_bytes",
        ),
        (
            vec!["--set".into(), "hbm_bytes=99999999999999999999".into()],
            "hbm_bytes",
        ),
        (vec!["--set".into(), "mxu_rows=3".into()], "mxu_rows"),
        (
            vec!["--set".into(), "cores_per_chip=0".into()],
            "cores_per_chip",
        ),
        (
            vec!["--set".into(), "costs.valu_latency=-1".into()],
            "costs.valu_latency",
        ),
        (
            vec!["--set".into(), "clock_hz=1e9\nhbm_bytes=1".into()],
            "--set",
        ),
        (vec!["--set".into(), "nonsense=1".into()], "nonsense"),
        (vec!["--set".into(), "clock_hz".into()], "FIELD=VALUE"),
        (vec!["--set".into(), "=".into()], "--set"),
        (
            vec!["--set".into(), "mxu_model=quantum".into()],
            "mxu_model",
        ),
    ];
    let small_gemm = [
        "bench", "gemm", "--m", "8", "--n", "8", "--k", "8", "--repeat", "1",
    ];
    for (extra, want) in &chip_cases {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let mut a = vec!["run", spin.as_str(), "--max-instructions", "1000"];
        a.extend(&extra);
        v.push(case(&a, want));
        let mut a = small_gemm.to_vec();
        a.extend(&extra);
        v.push(case(&a, want));
        let mut a = vec!["demo", "--small", "--out", d.to_str().unwrap()];
        a.extend(&extra);
        v.push(case(&a, want));
    }
    for (extra, want) in chip_cases.iter().take(7) {
        let mut a = vec!["bench", "eager", "--small"];
        a.extend(extra.iter().map(String::as_str));
        v.push(case(&a, want));
        let dir = p("golden_empty");
        let mut a = vec!["golden", "run", dir.as_str()];
        a.extend(extra.iter().map(String::as_str));
        v.push(case(&a, want));
    }
    v.push(case(&["chips", "--toml", "v99"], "v99"));

    // bench gemm sizes.
    for (extra, want) in [
        (
            &[
                "--m",
                "4294967295",
                "--n",
                "4294967295",
                "--k",
                "4294967295",
            ][..],
            "HBM",
        ),
        (&["--m", "4294967295", "--n", "8", "--k", "8"][..], "HBM"),
        (&["--m", "4294967296"][..], "--m"),
        (&["--m", "0"][..], "--m"),
        (&["--n", "-1"][..], "--n"),
        (&["--k", "1.5"][..], "--k"),
        (&["--repeat", "0"][..], "--repeat"),
        (&["--repeat", "-3"][..], "--repeat"),
        (&["--repeat", "1000001"][..], "--repeat"),
    ] {
        let mut a = vec!["bench", "gemm"];
        a.extend(extra);
        v.push(case(&a, want));
    }
    // bench collective.
    let coll = [
        "bench",
        "collective",
        "--op",
        "all-gather",
        "--slice",
        "v5e:2x2",
    ];
    for (extra, want) in [
        (
            &["--bytes", "1048576", "--chunk-bytes", "0"][..],
            "--chunk-bytes 0",
        ),
        (
            &["--bytes", "1048576", "--chunk-bytes", "1000"][..],
            "--chunk-bytes 1000",
        ),
        (
            &["--bytes", "1048576", "--chunk-bytes", "-4096"][..],
            "--chunk-bytes",
        ),
        (&["--bytes", "-1"][..], "--bytes"),
        (&["--bytes", "18446744073709551616"][..], "--bytes"),
        (
            &["--bytes", "1048576", "--max-instructions", "0"][..],
            "--max-instructions",
        ),
        (&["--bytes", "1048576", "--axes", "7"][..], "7"),
        (
            &["--bytes", "1048576", "--set", "ici_link_bytes_per_s=1e-300"][..],
            "ici_link_bytes_per_s",
        ),
    ] {
        let mut a = coll.to_vec();
        a.extend(extra);
        v.push(case(&a, want));
    }
    for slice in [
        "v5e:0x0",
        "v5e:axb",
        "v5e:99999x99999",
        "v99:2x2",
        "v5e:",
        "v5e:2x2x2x2",
    ] {
        v.push(case(
            &[
                "bench",
                "collective",
                "--op",
                "all-gather",
                "--bytes",
                "4096",
                "--slice",
                slice,
            ],
            "",
        ));
    }
    // bench eager: steps and the deferral limit.
    for steps in ["0", "-1", "1001", "many"] {
        v.push(case(
            &["bench", "eager", "--small", "--steps", steps],
            "--steps",
        ));
    }
    // Blocks too large for the chip are refused before anything is generated on the host
    // (found by review: 80 GB host allocations aborted, sizes past usize panicked).
    for (width, seq, want) in [
        ("1280000", "4096", "out of memory"),
        ("128", "10000000000", "out of memory"),
        ("128", "18446744073709551615", "out of memory"),
        ("18446744073709551488", "1", "too large"),
        ("32768", "32", "out of memory"),
    ] {
        v.push(case(
            &["bench", "eager", "--width", width, "--seq", seq],
            want,
        ));
    }
    for value in ["0", "-1", "abc", "99999999999", "1.5", ""] {
        v.push(Case {
            args: ["bench", "eager", "--small", "--mode", "defer"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            env: vec![("TORCH_TPU_DEFER_MAX_OPS", value)],
            want: "TORCH_TPU_DEFER_MAX_OPS",
        });
    }

    // Traces: bad times are errors naming the event and field.
    for (file, want) in [
        ("nan.json", "`ts`"),
        ("negdur.json", "`dur`"),
        ("backwards.json", "before it began"),
        ("notjson.json", "notjson.json"),
        ("missing.json", "missing.json"),
        ("golden_bad", "golden_bad"),
    ] {
        let png = p("shot.png");
        v.push(case(&["viz", &p(file), "--screenshot", &png], want));
    }
    for (flag, value) in [
        ("--width", "-1"),
        ("--width", "many"),
        ("--height", "4294967296"),
    ] {
        let png = p("shot.png");
        v.push(case(
            &["viz", &p("nan.json"), "--screenshot", &png, flag, value],
            flag,
        ));
    }

    // Golden runs: missing or unreadable directories.
    v.push(case(&["golden", "run", &p("missing_dir")], "missing_dir"));
    v.push(case(&["golden", "run", &p("golden_empty")], "golden_empty"));
    v.push(case(
        &["golden", "run", &p("golden_bad"), "--mode", "fast"],
        "--mode",
    ));
    // The op_db run needs PyTorch: a Python that cannot start is named; arguments meant for it
    // without `--op-db` are a usage error.
    v.push(Case {
        env: vec![("TPUEMU_PYTHON", "/nonexistent/python")],
        ..case(
            &["ops", "--op-db", "--", "-k", "abs"],
            "/nonexistent/python",
        )
    });
    v.push(case(&["ops", "--", "-k", "abs"], "--op-db"));
    v
}

/// Runs one case; `Err` says what was wrong with how it ended.
fn run_case(c: &Case) -> Result<(), String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tpuemu"))
        .args(&c.args)
        .envs(c.env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start: {e}"))?;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if start.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {HANG:?}: a hang"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("panicked") || err.contains("RUST_BACKTRACE") {
        return Err(format!("panicked: {err}"));
    }
    if !matches!(status.code(), Some(1 | 2)) {
        return Err(format!(
            "exit status {status}, expected 1 or 2; stderr: {err}"
        ));
    }
    if err.trim().is_empty() || !err.contains(c.want) {
        return Err(format!("stderr does not contain `{}`: {err}", c.want));
    }
    Ok(())
}

#[test]
fn the_battery_of_bad_inputs_is_refused_clearly() {
    let dir = fixtures("battery");
    let cases = battery(&dir);
    assert!(cases.len() >= 200, "{} cases", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            run_case(c).err().map(|why| {
                let env: Vec<String> = c.env.iter().map(|(k, v)| format!("{k}={v:?} ")).collect();
                format!("{}tpuemu {:?}: {why}", env.concat(), c.args)
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} bad inputs were not refused clearly:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    eprintln!("{} bad inputs, each refused clearly", cases.len());
}

#[test]
fn a_bad_chip_prints_no_progress_before_its_error() {
    let dir = fixtures("bad_chip");
    let o = Command::new(env!("CARGO_BIN_EXE_tpuemu"))
        .args(["demo", "--small", "--chip"])
        .arg(dir.join("bad_clock.toml"))
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("error:") && err.contains("clock_hz = inf"),
        "{err}"
    );
}

#[test]
fn a_large_output_is_written_piece_by_piece_and_reads_back() {
    // 3 MiB + 4 bytes: more than the 1 MiB pieces `run --output` reads from HBM at a time.
    let dir = fixtures("large_output");
    let out = dir.join("big.safetensors");
    let o = Command::new(env!("CARGO_BIN_EXE_tpuemu"))
        .arg("run")
        .arg(dir.join("args.s"))
        .args(["--alloc", "x=f32:786433", "--scalar", "n=1", "--output"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&out).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let x = st.tensor("x").unwrap();
    assert_eq!(x.shape(), [786433]);
    assert_eq!(x.dtype(), safetensors::Dtype::F32);
    assert_eq!(x.data().len(), 786433 * 4);
    assert!(x.data().iter().all(|&b| b == 0));
}
