import './base.css';
import './rankView.css';
