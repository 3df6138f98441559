//! The end-to-end benches' workload: a chain of pure handler steps and its input.

#![allow(dead_code)]

/// Steps in the chain.
pub const CHAIN_STEPS: usize = 10;

/// Ten `validate-document` steps, each reading the one before.
pub fn chain_definition() -> String {
    let mut text = String::from(
        "name = \"chain\"\nversion = 1\ndeadline = \"1h\"\n[budget]\nmax_attempts = 100\n\
         [input_schema]\ntype = \"object\"\n",
    );
    for i in 0..CHAIN_STEPS {
        text.push_str(&format!(
            "[[steps]]\nid = \"s{i}\"\nlabel = \"Step {i}\"\nkind = \"handler\"\n\
             component = \"validate-document\"\nversion = \"^1\"\noutputs = [\"title\", \"recipient\", \"body\"]\n"
        ));
        if i == 0 {
            text.push_str(
                "[steps.input]\ntitle = \"$input.title\"\nrecipient = \"$input.recipient\"\nbody = \"$input.body\"\n",
            );
        } else {
            let p = i - 1;
            text.push_str(&format!(
                "after = [\"s{p}\"]\n[steps.input]\ntitle = \"$steps.s{p}.output.title\"\n\
                 recipient = \"$steps.s{p}.output.recipient\"\nbody = \"$steps.s{p}.output.body\"\n"
            ));
        }
    }
    text
}

pub fn input(i: usize) -> String {
    format!(r#"{{"title":"Doc {i}","recipient":"a@example.com","body":"x"}}"#)
}
