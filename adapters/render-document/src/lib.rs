//! The `render-document` handler: renders a document request as plain text and computes
//! its digest, producing the input of the `http-delivery` adapter.
//!
//! Input `{"title", "recipient", "body"}` (other fields ignored); output
//! `{"recipient", "document", "document_digest": "sha256:<hex of the document's bytes>"}`.

use docket_guest::{Handler, HandlerContract, HandlerError, Json};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

/// The fields rendered; anything else in the input is ignored.
#[derive(Debug, Deserialize)]
struct DocumentRequest {
    title: String,
    recipient: String,
    body: String,
}

/// The handler; pure, like every docket handler.
struct RenderDocument;

impl Handler for RenderDocument {
    fn describe() -> HandlerContract {
        HandlerContract::new("render-document", "1.0.0")
    }

    fn run(input: Json) -> Result<Json, HandlerError> {
        let request: DocumentRequest = docket_guest::json::parse(&input)?;
        let document = render(&request);
        Ok(json!({
            "recipient": request.recipient,
            "document_digest": digest(&document),
            "document": document,
        })
        .to_string())
    }
}

/// The title, a blank line, the body, and a final newline.
fn render(request: &DocumentRequest) -> String {
    let mut document = format!("{}\n\n{}", request.title.trim(), request.body);
    if !document.ends_with('\n') {
        document.push('\n');
    }
    document
}

/// `sha256:` and the lower-case hex SHA-256 of the document's UTF-8 bytes.
fn digest(document: &str) -> String {
    let hash = Sha256::digest(document.as_bytes());
    let mut out = String::with_capacity(7 + 2 * hash.len());
    out.push_str("sha256:");
    for byte in hash {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_digests() {
        let request = DocumentRequest {
            title: "Hello".into(),
            recipient: "a@b".into(),
            body: "World".into(),
        };
        assert_eq!(render(&request), "Hello\n\nWorld\n");
        // sha256("abc")
        assert_eq!(
            digest("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

docket_guest::export_handler!(RenderDocument);
