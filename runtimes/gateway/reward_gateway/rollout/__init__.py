"""A candidate reward model beside the stable one: the split, shadow scoring and how far the two agree."""
