//! Generated bindings for docket's worlds. Nothing outside `runtime` sees these types.
//!
//! The host implements two versions of the `docket:plugin` package: the current one
//! (`wit/docket.wit`) and 0.2.0 (`wit/deps/docket-plugin-0.2.0`), whose components load and
//! run as they did ([`super::legacy`] maps them onto the current types).

/// The version of the `docket:plugin` package in `wit/docket.wit` that components are
/// built against now.
pub const PLUGIN_PACKAGE_VERSION: &str = "0.3.0";

/// The earlier version a component may still be built against.
pub const LEGACY_PACKAGE_VERSION: &str = "0.2.0";

/// The `adapter` world: docket's host interfaces plus `wasi:http`.
pub mod adapter {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "docket:plugin/adapter@0.3.0",
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        },
    });
}

/// The `full-adapter` world, for the interfaces an adapter may export besides the world's
/// functions (`observer`, `batcher`), found at load time.
pub mod full {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "docket:plugin/full-adapter@0.3.0",
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "docket:plugin/types@0.3.0": super::adapter::docket::plugin0_3_0::types,
            "docket:plugin/log@0.3.0": super::adapter::docket::plugin0_3_0::log,
            "docket:plugin/clock@0.3.0": super::adapter::docket::plugin0_3_0::clock,
            "docket:plugin/settings@0.3.0": super::adapter::docket::plugin0_3_0::settings,
            "docket:plugin/secrets@0.3.0": super::adapter::docket::plugin0_3_0::secrets,
        },
    });
}

/// The `handler` world; its host interfaces are the adapter world's, implemented once.
pub mod handler {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "docket:plugin/handler@0.3.0",
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "docket:plugin/types@0.3.0": super::adapter::docket::plugin0_3_0::types,
            "docket:plugin/log@0.3.0": super::adapter::docket::plugin0_3_0::log,
            "docket:plugin/clock@0.3.0": super::adapter::docket::plugin0_3_0::clock,
        },
    });
}

/// The 0.2.0 `adapter` world.
pub mod adapter_0_2 {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "docket:plugin/adapter@0.2.0",
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        },
    });
}

/// The 0.2.0 `handler` world.
pub mod handler_0_2 {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "docket:plugin/handler@0.2.0",
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "docket:plugin/types@0.2.0": super::adapter_0_2::docket::plugin0_2_0::types,
            "docket:plugin/log@0.2.0": super::adapter_0_2::docket::plugin0_2_0::log,
            "docket:plugin/clock@0.2.0": super::adapter_0_2::docket::plugin0_2_0::clock,
        },
    });
}
