"""The topology model: fields, tuples, streams, groupings, components, validation."""
