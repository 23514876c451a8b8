"""table features and what they ask of a version: protocol checks, properties, feature rules."""
