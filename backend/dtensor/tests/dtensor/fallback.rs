//! The replicate fallback for operators without a rule, the registry-wide check that every
//! operator has a rule or a reason, and in-place operators.

use super::*;

#[test]
fn an_operator_without_a_rule_runs_replicated_and_is_counted() {
    let m = mesh24();
    let o = check_op(
        &m,
        "aten::as_strided",
        &[inp(&[8, 8], &[S(0), S(1)], 1)],
        vec![
            Value::Ints(vec![4, 4]),
            Value::Ints(vec![1, 8]),
            Value::Int(2),
        ],
        0.0,
    );
    assert_eq!(o[0].placements(), &[R, R]);
    for mt in m.metrics() {
        assert_eq!(mt.sharding_fallbacks.get("aten::as_strided"), Some(&1));
        assert!(mt.report().contains("ShardingFallbacks"));
    }
}

#[test]
fn every_registered_operator_declares_a_rule_or_a_reason_to_run_replicated() {
    let mut undeclared = Vec::new();
    for (name, def) in ops::registry() {
        match def.sharding {
            ops::Sharding::Replicate(reason) => {
                assert!(
                    !reason.is_empty(),
                    "{name} runs replicated without a reason"
                );
                assert!(dtensor::sharding_rule(name).is_none());
                if reason == "no rule declared" {
                    undeclared.push(*name);
                }
            }
            _ => assert!(dtensor::sharding_rule(name).is_some(), "{name}"),
        }
    }
    assert!(
        undeclared.is_empty(),
        "operators that declare no sharding rule: {undeclared:?}"
    );
    // A rule that the fallback test above exercises.
    assert_eq!(dtensor::sharding_rule("aten::as_strided"), None);
    assert_eq!(dtensor::sharding_rule("aten::mm"), Some("matrix"));
    assert_eq!(
        dtensor::sharding_rule("aten::add_.Tensor"),
        Some("pointwise")
    );
}

#[test]
fn in_place_operators_keep_their_placement() {
    let m = mesh24();
    let x = distribute_slice(&m, &vals(64, 1), &[8, 8], &[S(0), S(1)]).unwrap();
    let y = distribute_slice(&m, &vals(64, 2), &[8, 8], &[R, R]).unwrap();
    let out = dtensor::call(&m, "aten::copy_", vec![x.clone().into(), y.clone().into()]).unwrap();
    assert_eq!(t(&out[0]).placements(), &[S(0), S(1)]);
    assert_eq!(x.to_vec::<f32>().unwrap(), vals(64, 2));
    let p = distribute_slice(&m, &vals(64, 1), &[8, 8], &[P, R]).unwrap();
    let e = dtensor::call(
        &m,
        "aten::fill_.Scalar",
        vec![p.into(), Value::Float(1.0).into()],
    )
    .unwrap_err();
    assert!(e.to_string().contains("in place"), "{e}");
}
