"""runners.sweep expands and applies overrides through Hydra's public API (issue 41: no hydra._internal): the basic
sweeper's job product (`sweep_product`) and compose's value overrides (`apply_values`), as Hydra 1.3 does them."""
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, HydraException
from omegaconf import OmegaConf

from runners.sweep import apply_values, sweep_product


def parsed(*lines):
    return OverridesParser.create().parse_overrides(list(lines))


def test_sweep_product_is_the_basic_sweepers():
    jobs = sweep_product(parsed("seq=256,512", "variant=two_pass", "head_dim=choice(64,128)", "seq=1024,2048"))
    # per key the last override wins, keys in the order they first appear, the cartesian product over keys
    assert jobs == [["seq=1024", "variant=two_pass", "head_dim=64"], ["seq=1024", "variant=two_pass", "head_dim=128"],
                    ["seq=2048", "variant=two_pass", "head_dim=64"], ["seq=2048", "variant=two_pass", "head_dim=128"]]
    assert sweep_product(parsed("batch=range(1,4)")) == [["batch=1"], ["batch=2"], ["batch=3"]]
    with pytest.raises(HydraException, match="does not support sweep type"):
        sweep_product(parsed("scale=interval(0,1)"))


def test_apply_values_sets_adds_and_deletes():
    cfg = OmegaConf.create({"a": 1, "b": {"c": 2}})
    OmegaConf.set_struct(cfg, True)
    apply_values(parsed("a=5", "b.c=7", "+d=1", "++a=9", "~b.c"), cfg)
    assert OmegaConf.to_container(cfg) == {"a": 9, "b": {}, "d": 1}
    for line, message in [("nope=1", "Could not override 'nope'"), ("+a=2", "An item is already at 'a'"),
                          ("~zz", "'zz' does not exist"), ("~a=3", "is 9 and not 3")]:
        with pytest.raises(ConfigCompositionException, match=message):
            apply_values(parsed(line), cfg)
