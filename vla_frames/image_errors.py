"""The one error every image-input failure raises, naming the request field entry that failed."""

from __future__ import annotations


class ImageInputError(ValueError):
    """A client-side image problem (a 4xx): ``str(err)`` reads ``image_data[<i>]: <problem>``."""

    def __init__(self, problem: str, index: int | None = None, field: str = "image_data"):
        self.problem = problem
        self.index = index
        self.field = field
        where = field if index is None else f"{field}[{index}]"
        super().__init__(f"{where}: {problem}")

    def at(self, index: int) -> ImageInputError:
        """The same problem, attributed to entry ``index`` of the request's list."""
        return ImageInputError(self.problem, index, self.field)
