//! `protection-manager strip-finalizers --controller NAME`: the safe path
//! before rolling back to a release that does not know a controller's
//! finalizer (vac-protection's before 0.4; docs/upstream-semantics.md §10.6).
//!
//! It refuses while the release record says the running manager adds the
//! finalizer (it would put it back), removes it from every object that is
//! not being deleted (one guarded JSON patch each: `test` then `remove`, so
//! a concurrent change is never clobbered), leaves objects being deleted to
//! the running manager (it removes the finalizer once they are unused), and
//! clears the record's minimum release when no object carries it any more.
//!
//! It refuses a controller whose finalizer every release with controllers
//! knows (pv-protection, pvc-protection, service-lb-cleanup: a rollback
//! never strands it, and under the upstream profile it is
//! kube-controller-manager's too), and it never strips an object in use
//! (as its controller's explain hook reads it live: a VolumeAttributesClass
//! a PVC or PV refers to, a ServiceCIDR whose addresses no other range
//! holds; an object whose use cannot be told) unless
//! `--strip-from-objects-in-use` says so: such an object is kept, listed
//! with its users, and the minimum release stays. Whether an object is in
//! use is asked only when it would be stripped, just before, for up to 64
//! objects at a time: one live read of every user for the batch where the
//! kind's hook has the batch form (`ExplainKind::explain_many`: a
//! VolumeAttributesClass's PVCs and PVs, a ServiceCIDR's ranges and
//! addresses), instead of one per object.
//!
//! A finalizer that stands for others (`FinalizedResource::
//! cleared_by_deleting`: the rules controller's `rule-cleanup` on a
//! ProtectionRule, whose own finalizer is on the objects it protects) is
//! never stripped: the command names the rules still carrying it and says
//! to delete them (the running manager then removes the rule's finalizer
//! from every object, then from the rule); once none does, it clears the
//! record's minimum as above.

use std::fmt::Write as _;

use anyhow::{Context, Result, bail};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use protection_core::release::CONTROLLERS_SINCE;
use protection_host::release_guard::{self, RecordLocation};
use serde_json::json;

use crate::cli::StripFinalizersArgs;
use crate::release_check::client;
use crate::run::manager_namespace;

/// How many objects one live read of their users covers: the read happens
/// at most this many strips before an object's own (a batch's reads are
/// one LIST round per kind of user instead of one per object).
const IN_USE_BATCH: usize = 64;

pub async fn strip_finalizers(args: &StripFinalizersArgs) -> Result<String> {
    let Some(controller) = &args.controller else {
        return crate::uninstall::strip_all(args).await;
    };
    let info = crate::controllers::infos()
        .find(|i| i.name == controller || i.aliases.contains(&controller.as_str()))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--controller {:?}: not a known controller (known: {})",
                controller,
                crate::controllers::infos()
                    .map(|i| i.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
    if info.finalizes.is_empty() {
        bail!(
            "--controller {:?}: its finalizer goes on whatever kinds its objects name, which this command cannot list",
            controller
        );
    }
    let finalizer = info.finalizer.get(args.finalizer_profile);
    if info.since <= CONTROLLERS_SINCE {
        let upstream = match args.finalizer_profile {
            protection_core::FinalizerProfile::Upstream => {
                " (and, as upstream's own name, kube-controller-manager removes it)"
            }
            _ => "",
        };
        bail!(
            "--controller {:?}: every release since {CONTROLLERS_SINCE} (the first with controllers) removes {finalizer}{upstream}: a rollback never strands it, so there is nothing to strip, and stripping it would let objects still in use be deleted",
            controller
        );
    }
    let client = client(&args.client).await?;
    let location = RecordLocation {
        namespace: manager_namespace(args.namespace.clone()),
        name: args.release_record_name.clone(),
    };
    protection_host::names::validate_namespace("--namespace", &location.namespace)?;
    let recorded = release_guard::read(&client, &location).await?;
    let minimum = recorded.as_ref().and_then(|r| r.minimum.clone());
    if let Some(m) = &minimum
        && let Some(f) = m
            .finalizers
            .iter()
            .find(|f| f.finalizer == finalizer && f.adding)
    {
        bail!(
            "the release record ConfigMap {}/{} says the running manager adds {finalizer} (feature gate {} on): it would put the finalizer back. \
             Turn the gate off first (helm upgrade --reset-then-reuse-values --set featureGates.{}=false) and wait for the rollout",
            location.namespace,
            location.name,
            f.gate,
            f.gate
        );
    }

    let mut out = String::new();
    let mut left = Vec::new();
    let mut undeleted = Vec::new();
    let mut in_use = Vec::new();
    for r in info.finalizes {
        let Some(holders) = release_guard::holders(&client, r, finalizer)
            .await
            .with_context(|| format!("listing {}", r.plural))?
        else {
            let _ = writeln!(
                out,
                "{}: not served by this cluster; nothing to strip",
                r.plural
            );
            continue;
        };
        let mut stripped = 0;
        let mut candidates = Vec::new();
        for (name, deleting) in holders {
            if deleting {
                left.push(format!("{}/{name}", r.plural));
            } else if r.cleared_by_deleting {
                undeleted.push(name);
            } else {
                candidates.push(name);
            }
        }
        // Whether an object is in use is read live just before it would be
        // stripped: for a batch of objects at a time, with one read of
        // their users when the kind's hook reads them all at once.
        for batch in candidates.chunks(IN_USE_BATCH) {
            let used = if args.strip_from_objects_in_use {
                Default::default()
            } else {
                crate::uninstall::in_use_many(&client, r, info.name, batch).await?
            };
            for name in batch {
                if let Some(why) = used.get(name) {
                    in_use.push(format!("{}/{name} ({why})", r.plural));
                    continue;
                }
                strip_one(&client, r, finalizer_subresource(info, r), name, finalizer)
                    .await
                    .with_context(|| format!("removing {finalizer} from {}/{name}", r.plural))?;
                let _ = writeln!(out, "{}/{name}: removed {finalizer}", r.plural);
                stripped += 1;
            }
        }
        if !r.cleared_by_deleting {
            let _ = writeln!(
                out,
                "{}: {finalizer} removed from {stripped} object(s)",
                r.plural
            );
        }
    }
    if !undeleted.is_empty() {
        let r = info
            .finalizes
            .iter()
            .find(|r| r.cleared_by_deleting)
            .map(|r| r.display())
            .unwrap_or_default();
        bail!(
            "{} {r} still carry {finalizer}: {}. It stands for each one's finalizer on the objects it protects, so it is not stripped: \
             delete them (kubectl delete {r} {}) and wait until they are gone (the running manager first removes each one's finalizer \
             from every object it protects), then run this again",
            undeleted.len(),
            undeleted.join(", "),
            undeleted.join(" ")
        );
    }
    if !in_use.is_empty() {
        let _ = writeln!(
            out,
            "kept {finalizer} on objects in use (removing it would let them be deleted while used; run this again once they are unused, or pass --strip-from-objects-in-use to remove it anyway): {}",
            in_use.join(", ")
        );
    }
    if !left.is_empty() {
        let _ = writeln!(
            out,
            "still carrying {finalizer} while being deleted (the running manager removes it once they are unused; run this again then): {}",
            left.join(", ")
        );
    }
    if !left.is_empty() || !in_use.is_empty() {
        if minimum.is_some() {
            let _ = writeln!(
                out,
                "the release record ConfigMap {}/{} keeps its minimum release until then",
                location.namespace, location.name
            );
        }
        return Ok(out);
    }
    if let (Some(rec), Some(m)) = (&recorded, &minimum) {
        let rest: Vec<_> = m
            .finalizers
            .iter()
            .filter(|f| f.finalizer != finalizer)
            .cloned()
            .collect();
        let new_min = (!rest.is_empty()).then_some(release_guard::MinimumRelease {
            release: m.release,
            finalizers: rest,
        });
        release_guard::record(
            &client,
            &location,
            rec.release,
            new_min.as_ref(),
            rec.binary_version.as_deref().unwrap_or_default(),
            "protection-manager strip-finalizers",
        )
        .await?;
        let _ = writeln!(
            out,
            "release record ConfigMap {}/{}: no object carries {finalizer}; {}",
            location.namespace,
            location.name,
            match &new_min {
                None => format!(
                    "minimum release {} cleared: release {} may roll back",
                    m.release, rec.release
                ),
                Some(n) => format!(
                    "minimum release {} kept for {:?}",
                    n.release,
                    n.finalizers
                        .iter()
                        .map(|f| &f.finalizer)
                        .collect::<Vec<_>>()
                ),
            }
        );
    }
    Ok(out)
}

/// Where `info`'s controller writes its finalizer on `r`'s objects, read
/// from the RBAC it declares (what the chart grants): the object itself, or
/// `Some("status")` where it may patch only the status subresource
/// (service-lb-cleanup, as upstream's service controller, writes a
/// Service's finalizer through `services/status`; the API server keeps
/// metadata changes made there).
pub(crate) fn finalizer_subresource(
    info: &protection_core::controllers::ControllerInfo,
    r: &protection_core::FinalizedResource,
) -> Option<&'static str> {
    let patches = |resource: &str| {
        info.rbac.iter().any(|p| {
            p.api_groups.contains(&r.group)
                && p.resources.contains(&resource)
                && p.verbs.contains(&"patch")
        })
    };
    (!patches(r.plural) && patches(&format!("{}/status", r.plural))).then_some("status")
}

/// One guarded removal: the patch fails (and nothing changes) if the list
/// changed since it was read. `subresource`: see [`finalizer_subresource`].
pub(crate) async fn strip_one(
    client: &kube::Client,
    r: &protection_core::FinalizedResource,
    subresource: Option<&str>,
    name: &str,
    finalizer: &str,
) -> Result<()> {
    let api_version = if r.group.is_empty() {
        String::new()
    } else {
        format!("{}/", r.group)
    };
    for version in r.versions {
        let ar = ApiResource {
            group: r.group.to_string(),
            version: version.to_string(),
            api_version: format!("{api_version}{version}"),
            kind: r.kind.to_string(),
            plural: r.plural.to_string(),
        };
        let (ns, n) = match name.split_once('/') {
            Some((ns, n)) => (Some(ns), n),
            None => (None, name),
        };
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let obj = match api.get_opt(n).await {
            Ok(Some(o)) => o,
            Ok(None) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(e.into()),
        };
        let list = obj.metadata.finalizers.clone().unwrap_or_default();
        let Some(i) = list.iter().position(|f| f == finalizer) else {
            return Ok(());
        };
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": list},
            {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
        ]);
        let patch: json_patch::Patch = serde_json::from_value(patch)?;
        let patch = Patch::<()>::Json(patch);
        match subresource {
            Some(sub) => {
                api.patch_subresource(sub, n, &PatchParams::default(), &patch)
                    .await?
            }
            None => api.patch(n, &PatchParams::default(), &patch).await?,
        };
        return Ok(());
    }
    bail!("{} is not served by this cluster", r.plural)
}

#[cfg(test)]
mod tests {
    use super::finalizer_subresource;

    /// The chart grants service-lb-cleanup `patch` on `services/status`
    /// only: its finalizer is stripped there (the real API server refused
    /// the hook's patch of the Service itself); every other kind is patched
    /// directly.
    #[test]
    fn the_finalizer_is_stripped_where_the_controller_may_write_it() {
        let mut seen = Vec::new();
        for info in crate::controllers::infos() {
            for r in info.finalizes {
                seen.push(format!(
                    "{} {:?}",
                    r.display(),
                    finalizer_subresource(info, r)
                ));
            }
        }
        assert!(
            seen.contains(&"services Some(\"status\")".to_string()),
            "{seen:?}"
        );
        assert!(
            seen.contains(&"persistentvolumeclaims None".to_string()),
            "{seen:?}"
        );
        assert_eq!(
            seen.iter()
                .filter(|s| s.ends_with("Some(\"status\")"))
                .count(),
            1,
            "{seen:?}"
        );
    }
}
