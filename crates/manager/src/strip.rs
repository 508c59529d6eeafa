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
use protection_host::release_guard::{self, RecordLocation};
use serde_json::json;

use crate::cli::StripFinalizersArgs;
use crate::release_check::client;
use crate::run::manager_namespace;

pub async fn strip_finalizers(args: &StripFinalizersArgs) -> Result<String> {
    let info = crate::controllers::infos()
        .find(|i| i.name == args.controller || i.aliases.contains(&args.controller.as_str()))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--controller {:?}: not a known controller (known: {})",
                args.controller,
                crate::controllers::infos()
                    .map(|i| i.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
    if info.finalizes.is_empty() {
        bail!(
            "--controller {:?}: its finalizer goes on whatever kinds its objects name, which this command cannot list",
            args.controller
        );
    }
    let finalizer = info.finalizer.get(args.finalizer_profile);
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
        for (name, deleting) in holders {
            if deleting {
                left.push(format!("{}/{name}", r.plural));
                continue;
            }
            if r.cleared_by_deleting {
                undeleted.push(name);
                continue;
            }
            strip_one(&client, r, &name, finalizer)
                .await
                .with_context(|| format!("removing {finalizer} from {}/{name}", r.plural))?;
            let _ = writeln!(out, "{}/{name}: removed {finalizer}", r.plural);
            stripped += 1;
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
    if !left.is_empty() {
        let _ = writeln!(
            out,
            "still carrying {finalizer} while being deleted (the running manager removes it once they are unused; run this again then): {}",
            left.join(", ")
        );
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

/// One guarded removal: the patch fails (and nothing changes) if the list
/// changed since it was read.
async fn strip_one(
    client: &kube::Client,
    r: &protection_core::FinalizedResource,
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
        api.patch(n, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await?;
        return Ok(());
    }
    bail!("{} is not served by this cluster", r.plural)
}
