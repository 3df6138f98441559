//! Loading components, telling adapters from handlers, and linking them per grant.
//!
//! Loading checks the bytes (a component, not a core module or garbage), compiles once
//! (memory and disk caches by digest), refuses a component built against another version of
//! the `docket:plugin` package, and calls `describe()` in a sandbox that grants nothing.
//! Preparing checks every import and every declared need against what the adapter's
//! actions are granted together, builds a linker with exactly those interfaces, and caches
//! the resulting `InstancePre` per (digest, grants); each call (`invoke`, `query`,
//! `compensate`) then reaches only its own action's grant.

use super::Runtime;
use super::bindings::adapter::AdapterPre;
use super::bindings::adapter::docket::plugin0_3_0::{clock, log, secrets, settings, types};
use super::bindings::adapter_0_2::AdapterPre as AdapterPreV2;
use super::bindings::handler::HandlerPre;
use super::bindings::handler_0_2::HandlerPre as HandlerPreV2;
use super::bindings::{LEGACY_PACKAGE_VERSION, PLUGIN_PACKAGE_VERSION};
use super::call::{CallFailure, CallLimits};
use super::legacy::{AnyAdapterPre, AnyHandlerPre};
use super::state::{CallEnv, HostState};
use crate::capabilities::{
    ActionGrants, Grant, HostRule, ImportVerdict, SecretSource, check_import,
};
use crate::clock::SystemClock;
use crate::contract::{
    CompensationClaim, Contract, DeclaredCapabilities, HandlerContract, IdempotencyClaim,
    QueryClaim,
};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::{Component, HasSelf, Linker};

/// How long `describe()` may take.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How much guest work `describe()` may do, in fuel units (about one per instruction): a
/// contract is a handful of strings, built in well under a million.
const DESCRIBE_FUEL: u64 = 200_000_000;

/// What a component is, with its declaration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "world", rename_all = "snake_case")]
pub enum ComponentKind {
    Adapter { contract: Contract },
    Handler { contract: HandlerContract },
}

/// A compiled, described component. Not yet linked to any grant.
pub struct LoadedComponent {
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    pub kind: ComponentKind,
    /// Every interface or function the component imports, e.g. `wasi:io/poll@0.2.12`.
    pub imports: Vec<String>,
    /// Every export, e.g. `invoke`.
    pub exports: Vec<String>,
    pub size_bytes: usize,
    component: Component,
}

impl LoadedComponent {
    /// `adapter` or `handler`: the world it was built against.
    pub fn world_name(&self) -> &'static str {
        match &self.kind {
            ComponentKind::Adapter { .. } => "adapter",
            ComponentKind::Handler { .. } => "handler",
        }
    }

    /// The declared name (adapter or handler).
    pub fn name(&self) -> &str {
        match &self.kind {
            ComponentKind::Adapter { contract } => &contract.name,
            ComponentKind::Handler { contract } => &contract.name,
        }
    }

    /// The declared version.
    pub fn version(&self) -> &str {
        match &self.kind {
            ComponentKind::Adapter { contract } => &contract.version,
            ComponentKind::Handler { contract } => &contract.version,
        }
    }

    /// The world this component implements.
    pub fn world(&self) -> World {
        match self.kind {
            ComponentKind::Adapter { .. } => World::Adapter,
            ComponentKind::Handler { .. } => World::Handler,
        }
    }

    /// Fails with a clear message unless the component implements `expected`.
    pub fn expect_world(&self, expected: World) -> Result<(), LoadError> {
        let found = self.world();
        if found == expected {
            Ok(())
        } else {
            Err(LoadError::WrongWorld {
                expected: expected.name(),
                found: found.name(),
            })
        }
    }

    /// The adapter contract, if this is an adapter.
    pub fn contract(&self) -> Option<&Contract> {
        match &self.kind {
            ComponentKind::Adapter { contract } => Some(contract),
            ComponentKind::Handler { .. } => None,
        }
    }
}

/// A linked, pre-instantiated component for one set of action grants: ready for calls.
pub struct Prepared {
    pub component: Arc<LoadedComponent>,
    /// The grant of `invoke` (and of a handler's `run`).
    pub(super) grant: Arc<Grant>,
    /// The grant of `query`.
    pub(super) query_grant: Arc<Grant>,
    /// The grant of `compensate`.
    pub(super) compensate_grant: Arc<Grant>,
    pub(super) pre: PreKind,
    /// Where the `observer` export is, for an adapter that exports it.
    pub(super) observer: Option<ObserverIndices>,
    /// Where the `batcher` export is, for an adapter that exports it.
    pub(super) batcher: Option<BatcherIndices>,
}

/// The indices of an adapter's `batcher` export.
pub(super) type BatcherIndices =
    super::bindings::full::exports::docket::plugin0_3_0::batcher::GuestIndices;

/// The indices of an adapter's `observer` export.
pub(super) type ObserverIndices =
    super::bindings::full::exports::docket::plugin0_3_0::observer::GuestIndices;

impl Prepared {
    /// `name@version`, for messages.
    pub fn name(&self) -> String {
        format!("{}@{}", self.component.name(), self.component.version())
    }

    /// The grant `invoke` (or a handler's `run`) runs under.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    /// Whether the adapter exports `batcher` (takes many items in one call).
    pub fn batches(&self) -> bool {
        self.batcher.is_some()
    }
}

pub(super) enum PreKind {
    Adapter(AnyAdapterPre),
    Handler(AnyHandlerPre),
}

/// The two docket worlds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    Adapter,
    Handler,
}

impl World {
    /// The world's name in `wit/docket.wit`.
    pub fn name(self) -> &'static str {
        match self {
            World::Adapter => "adapter",
            World::Handler => "handler",
        }
    }
}

/// Why a component cannot be loaded or run under a grant. Each says how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read `{path}`: {reason}")]
    Read { path: String, reason: String },
    #[error(
        "not a WebAssembly binary ({reason}); pass the `.wasm` file built with `cargo build --target wasm32-wasip2`"
    )]
    InvalidBytes { reason: String },
    #[error(
        "this is a core WebAssembly module, not a component; build the plugin with `cargo build --target wasm32-wasip2` (which produces a component) against docket's WIT in `wit/`"
    )]
    CoreModule,
    #[error("the component is invalid: {reason}")]
    Compile { reason: String },
    #[error(
        "the component is too large to compile: {reason}; split it or build it with optimisation (`--release`)"
    )]
    TooLarge { reason: String },
    #[error(
        "the component was built against {built_for} (it imports `{import}`), but this host runs plugins built against docket:plugin@{expected}; rebuild it against `wit/docket.wit` (package docket:plugin@{expected}){hint}"
    )]
    ContractVersion {
        /// `docket:plugin@<version>`, or a phrase when the import has no version.
        built_for: String,
        import: String,
        expected: &'static str,
        /// What changed since `built_for`, when docket knows.
        hint: &'static str,
    },
    #[error(
        "the component implements neither docket world: it exports [{exports}], but an adapter exports `describe`, `invoke`, `query` and `compensate`, and a handler `describe` and `run`; build it against `wit/docket.wit`"
    )]
    UnknownWorld { exports: String },
    #[error(
        "expected a component of the `{expected}` world, but this one implements the `{found}` world; use it as a {found} (step kind = \"{found}\") or build it against world `{expected}`"
    )]
    WrongWorld {
        expected: &'static str,
        found: &'static str,
    },
    #[error(
        "the component's exports do not match docket's `{world}` world: {reason}; rebuild it against `wit/docket.wit`"
    )]
    Signature { world: &'static str, reason: String },
    #[error("`describe()` failed: {0}")]
    Describe(CallFailure),
    #[error("`{name}@{version}` declares an unusable contract: {reason}")]
    UnusableContract {
        name: String,
        version: String,
        reason: String,
    },
    #[error(
        "`{name}@{version}` is already loaded with digest {loaded}, and these bytes have digest {offered}; a version never changes: give the changed component a new version"
    )]
    VersionTaken {
        name: String,
        version: String,
        loaded: String,
        offered: String,
    },
    #[error("the component imports `{import}`, which this step is not granted: {hint}")]
    ImportNotGranted { import: String, hint: String },
    #[error(
        "the component imports `{import}`, which docket does not provide; a plugin may import only the WASI baseline (wasi:io, wasi:clocks, wasi:random, wasi:cli, wasi:filesystem, wasi:sockets), docket:plugin interfaces and, when granted, wasi:http/outgoing-handler"
    )]
    UnknownImport { import: String },
    #[error(
        "the adapter's contract asks for {need}, which the effective grant does not include: {hint}"
    )]
    ExceedsGrant { need: String, hint: String },
}

impl Runtime {
    /// Loads a component file (see [`Runtime::load`]).
    pub async fn load_file(&self, path: &Path) -> Result<Arc<LoadedComponent>, LoadError> {
        let bytes = tokio::fs::read(path).await.map_err(|e| LoadError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        self.load(&bytes).await
    }

    /// Compiles (or fetches from cache) and describes a component.
    pub async fn load(&self, bytes: &[u8]) -> Result<Arc<LoadedComponent>, LoadError> {
        let hex = hex::encode(Sha256::digest(bytes));
        let digest = format!("sha256:{hex}");
        if let Some(found) = self.inner.loaded.lock().unwrap().get(&digest) {
            return Ok(found.clone());
        }
        check_header(bytes)?;
        check_code_size(bytes)?;
        let engine = &self.inner.engine;
        // Reading and writing the compiled-component cache and compiling are blocking work:
        // keep them off the async workers.
        let (disk, engine_owned, owned, key) = (
            self.inner.disk.clone(),
            engine.clone(),
            bytes.to_vec(),
            hex.clone(),
        );
        // Held through `describe()` as well: the pool reserves an instance per permit.
        let _compiling = self
            .inner
            .compiles
            .acquire()
            .await
            .map_err(|e| LoadError::Compile {
                reason: e.to_string(),
            })?;
        let component = tokio::task::spawn_blocking(move || {
            if let Some(cached) = disk.as_ref().and_then(|d| d.load(&engine_owned, &key)) {
                return Ok(cached);
            }
            let component = Component::new(&engine_owned, &owned).map_err(|e| LoadError::Compile {
                reason: format!("{e:#}"),
            });
            let component = component?;
            if let Some(disk) = &disk {
                disk.store(&key, &component);
                // Mapped from the file rather than kept in anonymous memory: only the code
                // that runs becomes resident, and the kernel may drop it and read it again.
                // Each loaded version costs a fraction of its compiled size.
                if let Some(mapped) = disk.load(&engine_owned, &key) {
                    return Ok(mapped);
                }
            }
            Ok(component)
        })
        .await
        .map_err(|e| LoadError::Compile {
            reason: e.to_string(),
        })??;
        let checked = self.check_compiled(component, bytes.len(), digest).await;
        if checked.is_err()
            && let Some(disk) = &self.inner.disk
        {
            // A refused component leaves no native code behind.
            disk.remove(&hex);
        }
        checked
    }

    /// Whether a component with `digest` is loaded here.
    pub fn is_loaded(&self, digest: &str) -> bool {
        self.inner.loaded.lock().unwrap().contains_key(digest)
    }

    /// Drops a component that was loaded only to be checked and then refused: from memory
    /// (its linked forms too) and from the compiled-component cache.
    pub fn forget(&self, digest: &str) {
        self.inner.loaded.lock().unwrap().remove(digest);
        self.inner
            .prepared
            .lock()
            .unwrap()
            .retain(|(d, _), _| d != digest);
        if let Some(disk) = &self.inner.disk {
            disk.remove(digest.trim_start_matches("sha256:"));
        }
    }

    /// The checks of a freshly compiled component, and its registration as loaded.
    async fn check_compiled(
        &self,
        component: Component,
        size_bytes: usize,
        digest: String,
    ) -> Result<Arc<LoadedComponent>, LoadError> {
        let engine = &self.inner.engine;
        let ty = component.component_type();
        let imports: Vec<String> = ty
            .imports(engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let exports: Vec<String> = ty
            .exports(engine)
            .map(|(name, _)| name.to_string())
            .collect();
        // Before anything else: a component of another contract version fails every later
        // check with a confusing message (unknown world, missing import, bad signature).
        check_contract_version(&imports)?;
        let has = |n: &str| exports.iter().any(|e| e == n);
        let world = if has("invoke") {
            World::Adapter
        } else if has("run") {
            World::Handler
        } else {
            return Err(LoadError::UnknownWorld {
                exports: exports.join(", "),
            });
        };
        // An import docket cannot provide under any grant is refused here, before anything
        // of the component runs; grant-dependent imports are checked by `prepare`.
        let everything = Grant::new(
            ["0.0.0.0:1".parse::<HostRule>().expect("valid rule")],
            ["*".to_string()],
        );
        if let Some(import) = imports
            .iter()
            .find(|i| check_import(i, &everything) == ImportVerdict::Unknown)
        {
            return Err(LoadError::UnknownImport {
                import: import.clone(),
            });
        }
        let kind = self.describe(&component, world).await?;
        check_optional_exports(&kind, &exports)?;
        let loaded = Arc::new(LoadedComponent {
            digest: digest.clone(),
            kind,
            imports,
            exports,
            size_bytes,
            component,
        });
        self.inner
            .loaded
            .lock()
            .unwrap()
            .insert(digest, loaded.clone());
        Ok(loaded)
    }

    /// Calls `describe()` with nothing granted: `wasi:http` and `secrets` are deny-all
    /// stubs, so a component that behaves at upload and turns hostile later still cannot
    /// reach the network, a secret or the host's HTTP resources from here, at upload or at
    /// any host's start. Fuel, the memory cap, the resource table's cap and a deadline bound
    /// the rest.
    async fn describe(
        &self,
        component: &Component,
        world: World,
    ) -> Result<ComponentKind, LoadError> {
        let grant = Arc::new(Grant::none());
        let linker = self
            .describe_linker(component)
            .map_err(|e| LoadError::Compile {
                reason: format!("{e:#}"),
            })?;
        let pre = linker
            .instantiate_pre(component)
            .map_err(|e| LoadError::Compile {
                reason: format!("{e:#}"),
            })?;
        let pre = wrap_pre(world, pre)?;
        let env = CallEnv {
            settings: Arc::new(BTreeMap::new()),
            secrets: Arc::new(SecretSource::default()),
            clock: SystemClock::new(),
            label: "describe".into(),
        };
        let limits = CallLimits {
            timeout: DESCRIBE_TIMEOUT,
        };
        let report = self
            .call_with_fuel(
                &pre,
                grant,
                env,
                limits,
                DESCRIBE_FUEL,
                async |store, pre| match pre {
                    PreKind::Adapter(pre) => {
                        let instance = pre.instantiate_async(&mut *store).await?;
                        let c = instance.call_describe(&mut *store).await?;
                        Ok(ComponentKind::Adapter {
                            contract: contract_from_wit(c),
                        })
                    }
                    PreKind::Handler(pre) => {
                        let instance = pre.instantiate_async(&mut *store).await?;
                        let c = instance.call_describe(&mut *store).await?;
                        Ok(ComponentKind::Handler {
                            contract: HandlerContract {
                                name: c.name,
                                version: c.version,
                            },
                        })
                    }
                },
                |k, _| k,
            )
            .await;
        let kind = report.outcome.map_err(LoadError::Describe)?;
        check_contract_sizes(&kind)?;
        Ok(kind)
    }

    /// Links `component` under `grant` for every action, after checking that the grant
    /// covers every import and every need its contract declares (`settings` resolve
    /// `$setting` hosts).
    pub fn prepare(
        &self,
        component: &Arc<LoadedComponent>,
        grant: &Grant,
        settings: &BTreeMap<String, String>,
    ) -> Result<Arc<Prepared>, LoadError> {
        self.prepare_actions(component, &ActionGrants::same(grant.clone()), settings)
    }

    /// Links `component` for what any of its actions may use, after checking that this
    /// union covers every import and every need its contract declares; each call then
    /// reaches only its own action's grant.
    pub fn prepare_actions(
        &self,
        component: &Arc<LoadedComponent>,
        grants: &ActionGrants,
        settings: &BTreeMap<String, String>,
    ) -> Result<Arc<Prepared>, LoadError> {
        let union = grants.union();
        let grant = &union;
        for import in &component.imports {
            match check_import(import, grant) {
                ImportVerdict::Allowed => {}
                ImportVerdict::NotGranted(hint) => {
                    return Err(LoadError::ImportNotGranted {
                        import: import.clone(),
                        hint,
                    });
                }
                ImportVerdict::Unknown => {
                    return Err(LoadError::UnknownImport {
                        import: import.clone(),
                    });
                }
            }
        }
        if let Some(contract) = component.contract() {
            check_declared_needs(&contract.capabilities, grant, settings)?;
        }
        let key = (component.digest.clone(), grants.fingerprint());
        if let Some(found) = self.inner.prepared.lock().unwrap().get(&key) {
            return Ok(found.clone());
        }
        let linker = self.linker(grant).map_err(|e| LoadError::Compile {
            reason: format!("{e:#}"),
        })?;
        let pre = linker
            .instantiate_pre(&component.component)
            .map_err(|e| LoadError::Compile {
                reason: format!("{e:#}"),
            })?;
        let world = component.world();
        let observer = if component.exports.iter().any(|e| e == OBSERVER_EXPORT) {
            Some(
                ObserverIndices::new(&pre).map_err(|e| LoadError::Signature {
                    world: "observing-adapter",
                    reason: format!("{e:#}"),
                })?,
            )
        } else {
            None
        };
        let batcher = if component.exports.iter().any(|e| e == BATCHER_EXPORT) {
            Some(BatcherIndices::new(&pre).map_err(|e| LoadError::Signature {
                world: "batching-adapter",
                reason: format!("{e:#}"),
            })?)
        } else {
            None
        };
        let prepared = Arc::new(Prepared {
            component: component.clone(),
            grant: Arc::new(grants.invoke.clone()),
            query_grant: Arc::new(grants.query.clone()),
            compensate_grant: Arc::new(grants.compensate.clone()),
            pre: wrap_pre(world, pre)?,
            observer,
            batcher,
        });
        self.inner
            .prepared
            .lock()
            .unwrap()
            .insert(key, prepared.clone());
        Ok(prepared)
    }

    /// Drops a component's compiled and linked forms from memory unless something still
    /// uses them: a running attempt (it holds a linked form or the component), or a holder
    /// other than the `outside` references the caller declares. Returns whether it went.
    pub fn unload_if_unused(&self, digest: &str, outside: usize) -> bool {
        let mut loaded = self.inner.loaded.lock().unwrap();
        let mut prepared = self.inner.prepared.lock().unwrap();
        let Some(component) = loaded.get(digest) else {
            return true;
        };
        let linked: Vec<&Arc<Prepared>> = prepared
            .iter()
            .filter(|((d, _), _)| d == digest)
            .map(|(_, p)| p)
            .collect();
        // A linked form held outside the cache is an attempt under way.
        if linked.iter().any(|p| Arc::strong_count(p) > 1) {
            return false;
        }
        // This cache, each linked form, and the caller's own references.
        if Arc::strong_count(component) > 1 + linked.len() + outside {
            return false;
        }
        prepared.retain(|(d, _), _| d != digest);
        loaded.remove(digest);
        true
    }

    /// A linker with the WASI baseline (empty context), docket's always-linked interfaces,
    /// and — only if granted — `wasi:http` and `secrets`.
    fn linker(&self, grant: &Grant) -> wasmtime::Result<Linker<HostState>> {
        let mut linker = self.baseline_linker()?;
        if grant.allows_secrets() {
            secrets::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
            super::legacy::add_secrets(&mut linker)?;
        }
        if grant.allows_http() {
            wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        }
        Ok(linker)
    }

    /// The WASI baseline and docket's always-linked interfaces.
    fn baseline_linker(&self) -> wasmtime::Result<Linker<HostState>> {
        let mut linker = Linker::new(&self.inner.engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        log::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
        clock::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
        settings::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
        types::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
        // A component built against 0.2.0 imports that version's interfaces.
        super::legacy::add_to_linker(&mut linker)?;
        Ok(linker)
    }

    /// The linker of `describe()`: the baseline, `secrets` answering every name with
    /// `not-granted`, and every other import — `wasi:http` — a function that traps. Every
    /// import is linked, so no adapter is refused for what it imports.
    fn describe_linker(&self, component: &Component) -> wasmtime::Result<Linker<HostState>> {
        use wasmtime::component::ResourceType;
        use wasmtime::component::types::ComponentItem;
        let engine = &self.inner.engine;
        let mut linker = self.baseline_linker()?;
        secrets::add_to_linker::<HostState, NoSecrets>(&mut linker, |_| NoSecrets)?;
        super::legacy::add_no_secrets(&mut linker)?;
        // Imports come in dependency order: a resource an interface only `use`s from an
        // earlier one (a `pollable`, an `input-stream`) is already known and is not
        // defined again; the interface's own resources get an inert host type.
        let mut known: Vec<ResourceType> = Vec::new();
        for (name, import) in component.component_type().imports(engine) {
            let ComponentItem::ComponentInstance(instance_type) = import.ty else {
                continue;
            };
            let stubbed = name.starts_with("wasi:http/");
            let mut instance = stubbed.then(|| linker.instance(name)).transpose()?;
            for (export, item) in instance_type.exports(engine) {
                match item.ty {
                    ComponentItem::Resource(resource) if !known.contains(&resource) => {
                        known.push(resource);
                        if let Some(instance) = instance.as_mut() {
                            instance.resource(
                                export,
                                ResourceType::host::<DescribeStub>(),
                                |_, _| Ok(()),
                            )?;
                        }
                    }
                    ComponentItem::ComponentFunc(_) => {
                        if let Some(instance) = instance.as_mut() {
                            let what = format!("{name}#{export}");
                            instance.func_new(export, move |_, _, _, _| {
                                Err(wasmtime::format_err!(
                                    "`{what}` is not available in `describe()`: a contract is declared, not fetched"
                                ))
                            })?;
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(linker)
    }
}

/// The host type of `wasi:http`'s resources during `describe()`: none is ever created.
struct DescribeStub;

/// `secrets` during `describe()`: no name is granted.
struct NoSecrets;

impl wasmtime::component::HasData for NoSecrets {
    type Data<'a> = NoSecrets;
}

impl secrets::Host for NoSecrets {
    fn get(&mut self, name: String) -> Result<String, secrets::SecretError> {
        Err(secrets::SecretError::NotGranted(name))
    }
}

/// The component's exports bound to the bindings of the version it was built against:
/// the current one, else 0.2.0 (its imports name the version; its exports' types decide).
fn wrap_pre(
    world: World,
    pre: wasmtime::component::InstancePre<HostState>,
) -> Result<PreKind, LoadError> {
    let refused = |world: &'static str, e: wasmtime::Error| LoadError::Signature {
        world,
        reason: format!("{e:#}"),
    };
    match world {
        World::Adapter => match AdapterPre::new(pre.clone()) {
            Ok(current) => Ok(PreKind::Adapter(AnyAdapterPre::Current(current))),
            Err(e) => AdapterPreV2::new(pre)
                .map(|old| PreKind::Adapter(AnyAdapterPre::V0_2(old)))
                .map_err(|_| refused("adapter", e)),
        },
        World::Handler => match HandlerPre::new(pre.clone()) {
            Ok(current) => Ok(PreKind::Handler(AnyHandlerPre::Current(current))),
            Err(e) => HandlerPreV2::new(pre)
                .map(|old| PreKind::Handler(AnyHandlerPre::V0_2(old)))
                .map_err(|_| refused("handler", e)),
        },
    }
}

/// Refuses a component whose `docket:plugin` imports carry another version than the one
/// this host's bindings implement, naming both versions.
fn check_contract_version(imports: &[String]) -> Result<(), LoadError> {
    for import in imports {
        let Some(rest) = import.strip_prefix("docket:plugin/") else {
            continue;
        };
        let built_for = rest.split_once('@').map(|(_, v)| v);
        if built_for == Some(PLUGIN_PACKAGE_VERSION) || built_for == Some(LEGACY_PACKAGE_VERSION) {
            continue;
        }
        let hint = match built_for {
            Some("0.1.0") => {
                "; since 0.1.0, `compensate` takes a compensation-request (its own idempotency key, its input, the original receipt and the attempt) and a lookup's `found` carries the effect's status (with docket-guest: update it, then implement `compensate(request)` and build lookups with `Lookup::found(receipt, status, provider_status)`)"
            }
            _ => "",
        };
        return Err(LoadError::ContractVersion {
            built_for: built_for.map_or("an unversioned docket:plugin".to_string(), |v| {
                format!("docket:plugin@{v}")
            }),
            import: import.clone(),
            expected: PLUGIN_PACKAGE_VERSION,
            hint,
        });
    }
    Ok(())
}

/// Most functions a component's core modules may define, summed.
pub const MAX_FUNCTIONS: usize = 50_000;
/// Longest body one function may have, in bytes.
pub const MAX_FUNCTION_BYTES: usize = 1 << 20;

/// Bounds what the compiler is given: Cranelift cannot be stopped partway, so a component
/// with too many or too large functions is refused before compiling starts. A parse error
/// here is left to the compiler, which says it better.
fn check_code_size(bytes: &[u8]) -> Result<(), LoadError> {
    let mut functions = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let Ok(payload) = payload else {
            return Ok(());
        };
        if let wasmparser::Payload::CodeSectionEntry(body) = payload {
            functions += 1;
            let size = body.range().len();
            if size > MAX_FUNCTION_BYTES {
                return Err(LoadError::TooLarge {
                    reason: format!(
                        "function {functions} has a body of {size} bytes, over the limit of {MAX_FUNCTION_BYTES}"
                    ),
                });
            }
            if functions > MAX_FUNCTIONS {
                return Err(LoadError::TooLarge {
                    reason: format!("it defines more than {MAX_FUNCTIONS} functions"),
                });
            }
        }
    }
    Ok(())
}

/// Rejects garbage and core modules before the compiler sees them.
fn check_header(bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::InvalidBytes {
            reason: "it does not start with the `\\0asm` magic number".into(),
        });
    }
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(LoadError::CoreModule);
    }
    Ok(())
}

/// Checks the adapter's declared capabilities against the grant.
fn check_declared_needs(
    declared: &DeclaredCapabilities,
    grant: &Grant,
    settings: &BTreeMap<String, String>,
) -> Result<(), LoadError> {
    for host in &declared.outbound_hosts {
        let rule = if let Some(setting) = host.strip_prefix('$') {
            let Some(url) = settings.get(setting) else {
                return Err(LoadError::ExceedsGrant {
                    need: format!("outbound HTTP to the host in setting `{setting}`"),
                    hint: format!(
                        "set `{setting}` in the operator config's settings for this adapter"
                    ),
                });
            };
            url.parse::<HostRule>()
                .map_err(|e| LoadError::ExceedsGrant {
                    need: format!("outbound HTTP to `{url}` (setting `{setting}`)"),
                    hint: e.to_string(),
                })?
        } else {
            host.parse::<HostRule>()
                .map_err(|e| LoadError::ExceedsGrant {
                    need: format!("outbound HTTP to `{host}`"),
                    hint: e.to_string(),
                })?
        };
        if !grant.hosts().iter().any(|g| g.covers(&rule)) {
            return Err(LoadError::ExceedsGrant {
                need: format!("outbound HTTP to `{rule}`"),
                hint: format!(
                    "request it in the step's capabilities and allow it for this adapter in the operator config (granted: [{}])",
                    grant
                        .hosts()
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    for secret in &declared.secrets {
        if !grant.secrets().contains(secret) {
            return Err(LoadError::ExceedsGrant {
                need: format!("secret `{secret}`"),
                hint: "request it in the step's capabilities and allow it for this adapter in the operator config".into(),
            });
        }
    }
    Ok(())
}

/// Longest name a component may declare, in bytes.
const MAX_NAME_BYTES: usize = 128;
/// Longest version, namespace, host or secret name, in bytes.
const MAX_FIELD_BYTES: usize = 512;
/// Most outbound hosts or secrets a contract may declare.
const MAX_LIST_ITEMS: usize = 32;

/// Refuses a declaration whose strings are too long to store or show: a contract is a
/// handful of short strings, and what a guest returns reaches the database and every page.
fn check_contract_sizes(kind: &ComponentKind) -> Result<(), LoadError> {
    let (name, version, lists): (&str, &str, Vec<(&str, &[String])>) = match kind {
        ComponentKind::Adapter { contract: c } => (
            &c.name,
            &c.version,
            vec![
                ("outbound host", &c.capabilities.outbound_hosts[..]),
                ("secret", &c.capabilities.secrets[..]),
                ("namespace", std::slice::from_ref(&c.idempotency.namespace)),
            ],
        ),
        ComponentKind::Handler { contract: c } => (&c.name, &c.version, Vec::new()),
    };
    let refuse = |reason: String| LoadError::UnusableContract {
        name: super::call::cut_to(name, MAX_NAME_BYTES),
        version: super::call::cut_to(version, MAX_NAME_BYTES),
        reason,
    };
    if name.len() > MAX_NAME_BYTES {
        return Err(refuse(format!(
            "its name has {} bytes, over the limit of {MAX_NAME_BYTES}",
            name.len()
        )));
    }
    if version.len() > MAX_FIELD_BYTES {
        return Err(refuse(format!(
            "its version has {} bytes, over the limit of {MAX_FIELD_BYTES}",
            version.len()
        )));
    }
    for (what, items) in lists {
        if items.len() > MAX_LIST_ITEMS {
            return Err(refuse(format!(
                "it declares {} of kind {what}, over the limit of {MAX_LIST_ITEMS}",
                items.len()
            )));
        }
        if let Some(long) = items.iter().find(|i| i.len() > MAX_FIELD_BYTES) {
            return Err(refuse(format!(
                "a declared {what} has {} bytes, over the limit of {MAX_FIELD_BYTES}",
                long.len()
            )));
        }
    }
    Ok(())
}

fn contract_from_wit(c: types::Contract) -> Contract {
    Contract {
        name: c.name,
        version: c.version,
        idempotency: IdempotencyClaim {
            supported: c.idempotency.supported,
            retention_seconds: c.idempotency.retention_seconds,
            namespace: c.idempotency.namespace,
        },
        query: QueryClaim {
            supported: c.query.supported,
            visibility_window_ms: c.query.visibility_window_ms,
        },
        compensation: CompensationClaim {
            supported: c.compensation.supported,
        },
        capabilities: DeclaredCapabilities {
            outbound_hosts: c.capabilities.outbound_hosts,
            secrets: c.capabilities.secrets,
        },
        observes: c.observes,
        batch: c.batch,
    }
}

/// The interface an adapter that `observes` exports.
pub(super) const OBSERVER_EXPORT: &str = "docket:plugin/observer@0.3.0";
/// The interface an adapter with a `batch` size exports.
pub(super) const BATCHER_EXPORT: &str = "docket:plugin/batcher@0.3.0";

/// A contract's `observes` and `batch` are claims about the component's exports: each must
/// hold (a world has no optional exports, so they are found at load).
fn check_optional_exports(kind: &ComponentKind, exports: &[String]) -> Result<(), LoadError> {
    let ComponentKind::Adapter { contract } = kind else {
        return Ok(());
    };
    let exports_named = |n: &str| exports.iter().any(|e| e == n);
    let refuse = |reason: String| LoadError::UnusableContract {
        name: contract.name.clone(),
        version: contract.version.clone(),
        reason,
    };
    if contract.observes && !exports_named(OBSERVER_EXPORT) {
        return Err(refuse(format!(
            "its contract says `observes`, but it exports no `{OBSERVER_EXPORT}`; build it against the `observing-adapter` world (or `full-adapter`), or declare `observes: false`"
        )));
    }
    if contract.batch.is_some() && !exports_named(BATCHER_EXPORT) {
        return Err(refuse(format!(
            "its contract gives a `batch` size, but it exports no `{BATCHER_EXPORT}`; build it against the `batching-adapter` world (or `full-adapter`), or declare `batch: none`"
        )));
    }
    if contract.batch == Some(0) {
        return Err(refuse(
            "its contract gives a `batch` size of 0; give the most items one call takes, at least 1".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter(name: &str, hosts: Vec<String>, secrets: Vec<String>) -> ComponentKind {
        ComponentKind::Adapter {
            contract: contract_from_wit(types::Contract {
                name: name.into(),
                version: "1.0.0".into(),
                idempotency: types::Idempotency {
                    supported: true,
                    retention_seconds: 60,
                    namespace: "ns".into(),
                },
                query: types::QuerySupport {
                    supported: false,
                    visibility_window_ms: 0,
                },
                compensation: types::CompensationSupport { supported: false },
                capabilities: types::Capabilities {
                    outbound_hosts: hosts,
                    secrets,
                },
                observes: false,
                batch: None,
            }),
        }
    }

    /// A contract's strings reach the database and every page: oversized ones refuse the
    /// component at load, and the refusal itself quotes only a bounded name.
    #[test]
    fn oversized_contract_strings_are_refused() {
        assert!(check_contract_sizes(&adapter("ok", vec![], vec![])).is_ok());
        let long = "n".repeat(1 << 20);
        for (kind, expect) in [
            (adapter(&long, vec![], vec![]), "its name has 1048576 bytes"),
            (
                adapter("a", vec!["h".repeat(600)], vec![]),
                "a declared outbound host has 600 bytes",
            ),
            (
                adapter("a", vec![], vec!["s".into(); 33]),
                "33 of kind secret",
            ),
        ] {
            let err = check_contract_sizes(&kind).unwrap_err().to_string();
            assert!(err.contains(expect), "{err}");
            assert!(err.len() < 1024, "{} bytes", err.len());
        }
    }
}
