"""What users declare: scenarios (scenario), the sites a run instruments (sites), patch sets (patchsets),
source patches (overlay), run plans (plan), ceilings (limits), allocators and glibc knobs (allocators)."""
