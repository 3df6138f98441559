//! Generated bindings for docket's worlds.
//!
//! `common` owns the shared `docket:plugin` interfaces (types, log, clock); the `adapter`
//! and `handler` worlds reuse them through `with`, so `Receipt` and `log::write` exist
//! once. WASI interfaces map to the `wasip2` crate, whose client the [`crate::http`] module
//! uses directly.
//!
//! Each world sits behind its feature because every generated world links a custom section
//! describing its imports into the component; a plugin enables only its own world so its
//! component declares nothing of the other one. A world's exports are declared only when
//! its export macro runs, and imports the code never calls (HTTP, secrets) drop out.

/// The shared interfaces, with every contract type generated.
pub mod common {
    wit_bindgen::generate!({
        inline: "
            package docket:guest;

            world common {
                import docket:plugin/types@0.3.0;
                import docket:plugin/log@0.3.0;
                import docket:plugin/clock@0.3.0;
            }
        ",
        path: "../../wit",
        generate_all,
        generate_unused_types: true,
        additional_derives: [PartialEq, Eq],
    });
}

/// Bindings for the `adapter` world.
#[cfg(feature = "adapter")]
// The generated export of `compensate` takes its flattened request (9 core arguments).
#[allow(clippy::too_many_arguments)]
pub mod adapter {
    wit_bindgen::generate!({
        world: "docket:plugin/adapter@0.3.0",
        path: "../../wit",
        with: {
            "docket:plugin/types@0.3.0": crate::bindings::common::docket::plugin0_3_0::types,
            "docket:plugin/log@0.3.0": crate::bindings::common::docket::plugin0_3_0::log,
            "docket:plugin/clock@0.3.0": crate::bindings::common::docket::plugin0_3_0::clock,
            "wasi:http/types@0.2.12": wasip2::http::types,
            "wasi:http/outgoing-handler@0.2.12": wasip2::http::outgoing_handler,
            "wasi:io/poll@0.2.12": wasip2::io::poll,
            "wasi:io/error@0.2.12": wasip2::io::error,
            "wasi:io/streams@0.2.12": wasip2::io::streams,
            "wasi:clocks/monotonic-clock@0.2.12": wasip2::clocks::monotonic_clock,
        },
        additional_derives: [PartialEq, Eq],
        pub_export_macro: true,
        export_macro_name: "__export_adapter_world",
        default_bindings_module: "docket_guest::bindings::adapter",
    });
}

/// Bindings for the `observing-adapter` world: the `adapter` world and `observer`. With
/// `full-adapter` enabled too (one crate's feature, another's), `full-adapter` wins: one
/// world's exports per component.
#[cfg(all(feature = "observing-adapter", not(feature = "full-adapter")))]
#[allow(clippy::too_many_arguments)]
pub mod observing_adapter {
    wit_bindgen::generate!({
        world: "docket:plugin/observing-adapter@0.3.0",
        path: "../../wit",
        with: {
            "docket:plugin/types@0.3.0": crate::bindings::common::docket::plugin0_3_0::types,
            "docket:plugin/log@0.3.0": crate::bindings::common::docket::plugin0_3_0::log,
            "docket:plugin/clock@0.3.0": crate::bindings::common::docket::plugin0_3_0::clock,
            "wasi:http/types@0.2.12": wasip2::http::types,
            "wasi:http/outgoing-handler@0.2.12": wasip2::http::outgoing_handler,
            "wasi:io/poll@0.2.12": wasip2::io::poll,
            "wasi:io/error@0.2.12": wasip2::io::error,
            "wasi:io/streams@0.2.12": wasip2::io::streams,
            "wasi:clocks/monotonic-clock@0.2.12": wasip2::clocks::monotonic_clock,
        },
        additional_derives: [PartialEq, Eq],
        pub_export_macro: true,
        export_macro_name: "__export_observing_adapter_world",
        default_bindings_module: "docket_guest::bindings::observing_adapter",
    });
}

/// Bindings for the `full-adapter` world: the `adapter` world, `observer` and `batcher`.
#[cfg(feature = "full-adapter")]
#[allow(clippy::too_many_arguments)]
pub mod full_adapter {
    wit_bindgen::generate!({
        world: "docket:plugin/full-adapter@0.3.0",
        path: "../../wit",
        with: {
            "docket:plugin/types@0.3.0": crate::bindings::common::docket::plugin0_3_0::types,
            "docket:plugin/log@0.3.0": crate::bindings::common::docket::plugin0_3_0::log,
            "docket:plugin/clock@0.3.0": crate::bindings::common::docket::plugin0_3_0::clock,
            "wasi:http/types@0.2.12": wasip2::http::types,
            "wasi:http/outgoing-handler@0.2.12": wasip2::http::outgoing_handler,
            "wasi:io/poll@0.2.12": wasip2::io::poll,
            "wasi:io/error@0.2.12": wasip2::io::error,
            "wasi:io/streams@0.2.12": wasip2::io::streams,
            "wasi:clocks/monotonic-clock@0.2.12": wasip2::clocks::monotonic_clock,
        },
        additional_derives: [PartialEq, Eq],
        pub_export_macro: true,
        export_macro_name: "__export_full_adapter_world",
        default_bindings_module: "docket_guest::bindings::full_adapter",
    });
}

/// Bindings for the `handler` world.
#[cfg(feature = "handler")]
pub mod handler {
    wit_bindgen::generate!({
        world: "docket:plugin/handler@0.3.0",
        path: "../../wit",
        with: {
            "docket:plugin/types@0.3.0": crate::bindings::common::docket::plugin0_3_0::types,
            "docket:plugin/log@0.3.0": crate::bindings::common::docket::plugin0_3_0::log,
            "docket:plugin/clock@0.3.0": crate::bindings::common::docket::plugin0_3_0::clock,
        },
        pub_export_macro: true,
        export_macro_name: "__export_handler_world",
        default_bindings_module: "docket_guest::bindings::handler",
    });
}

/// The adapter world this crate was built for: the host interfaces only adapters import
/// (`settings`, `secrets`) are reached through it.
#[cfg(feature = "adapter")]
pub use adapter as world;
#[cfg(all(feature = "full-adapter", not(feature = "adapter")))]
pub use full_adapter as world;
#[cfg(all(
    feature = "observing-adapter",
    not(feature = "adapter"),
    not(feature = "full-adapter")
))]
pub use observing_adapter as world;
