from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']
__version__ = '2.3.0+cu121'
debug = False
cuda: Optional[str] = '12.1'
git_version = '97ff6cfd9c86c5c09d7ce775ab64ec5c99230f5d'
hip: Optional[str] = None
