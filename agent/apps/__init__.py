"""The subcommands that run the pipeline on this machine: `voxroom demo`, `voxroom doctor`,
`voxroom simulate`."""
