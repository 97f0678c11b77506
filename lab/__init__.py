"""lab/ is a package only so that its tests import as lab.tests.* beside the product's tests package."""
