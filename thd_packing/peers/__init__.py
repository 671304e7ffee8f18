"""Adapters for other trainers' packers, loaded from their published wheels (`--target verl`)."""
