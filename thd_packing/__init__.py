"""THD packing: the spec's rule text (`spec`), its literal oracle (`reference`), the
conformance suite (`conformance`) and the field's adapters to it (`peers`), shipped as one
package so that `pip install` adds one top-level name. The fast implementation, `impl/`, lives
in the checkout and is vendored by copying."""
