use super::*;

const DOC: &str = r#"
[[rules]]
subjects = ["billing-service"]
adapters = ["namespace:reference-provider"]
actions = ["invoke"]
environments = ["production"]
effect = "deny"
reason = "billing may not deliver documents in production"

[[rules]]
workflows = ["document-delivery"]
effect = "allow"
"#;

fn facts<'a>(subject: &'a str, environment: &'a str, action: PolicyAction) -> Facts<'a> {
    Facts {
        subject,
        workflow: "document-delivery",
        step: "deliver",
        adapter: "http-delivery",
        namespace: "reference-provider",
        action,
        environment,
    }
}

#[test]
fn the_first_matching_rule_decides_and_none_denies() {
    let doc = PolicyDoc::parse(DOC).unwrap();
    let denied = doc.decide(&facts(
        "billing-service",
        "production",
        PolicyAction::Invoke,
    ));
    assert!(!denied.allowed);
    assert_eq!(denied.rule, Some(1));
    assert_eq!(
        denied.reason,
        "billing may not deliver documents in production"
    );
    // Another action, environment or subject passes the first rule to the second.
    for f in [
        facts("billing-service", "production", PolicyAction::Compensate),
        facts("billing-service", "staging", PolicyAction::Invoke),
        facts("reports", "production", PolicyAction::Invoke),
    ] {
        let d = doc.decide(&f);
        assert!(d.allowed, "{f:?}");
        assert_eq!(d.rule, Some(2));
    }
    let other = Facts {
        workflow: "payroll",
        ..facts("reports", "production", PolicyAction::Invoke)
    };
    let d = doc.decide(&other);
    assert!(!d.allowed);
    assert_eq!(d.rule, None);
    assert!(InForce::none().decide(&other).allowed);
}

#[test]
fn a_bad_document_is_refused_with_its_line_and_column() {
    let err = PolicyDoc::parse("[[rules]]\neffect = \"maybe\"\n").unwrap_err();
    assert_eq!((err[0].line, err[0].column), (2, 10));
    assert!(err[0].message.contains("allow"), "{}", err[0].message);
    let err = PolicyDoc::parse("[[rules]]\neffect = \"allow\"\nsubject = [\"a\"]\n").unwrap_err();
    assert_eq!(err[0].line, 3);
    assert!(
        err[0].message.contains("unknown field `subject`"),
        "{}",
        err[0].message
    );
    let err = PolicyDoc::parse("\n\n[[rules]]\neffect = \"allow\"\nsteps = [\"\"]\n").unwrap_err();
    assert_eq!((err[0].line, err[0].column), (3, 1));
    assert!(err[0].message.contains("empty entry in `steps`"));
}
